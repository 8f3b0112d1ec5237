"""The metrics catalogue (metrics.py's docstring) says what is exported, no more, no less.

Dashboards, alert rules and operators read the catalogue; a metric renamed, a
label added or a documented metric that no code registers would otherwise be
found only when a panel stays empty.
"""

from __future__ import annotations

import re

from jobwarden.observability import meters, metrics

_ROW = re.compile(r"^(jobwarden_\w+)\s+(counter|gauge|histogram)\s+(.+?)\s*$", re.MULTILINE)
_INLINE = re.compile(r"``(jobwarden_\w+)\{([^}]*)\}``")


def _documented() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    doc = metrics.__doc__ or ""
    found: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for name, kind, labels in _ROW.findall(doc):
        found[name] = (kind, () if labels == "(none)" else
                       tuple(label.strip() for label in labels.split(",")))
    for name, labels in _INLINE.findall(doc):
        found.setdefault(name, (None, tuple(label.strip() for label in labels.split(","))))
    return found


def _registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for value in vars(metrics).values():
        if isinstance(value, meters.Family):
            kind = value._type
            name = value._name + ("_total" if kind == "counter" else "")
            found[name] = (kind, tuple(value._labelnames))
        elif isinstance(value, metrics._DatabaseCounter):
            found[f"{value.name}_total"] = ("counter", value.labels)
    return found


def test_every_registered_metric_is_in_the_catalogue_with_its_type_and_labels() -> None:
    documented, registered = _documented(), _registered()
    assert registered, "no metric found in jobwarden.observability.metrics"
    for name, (kind, labels) in registered.items():
        assert name in documented, f"{name} is exported but not in the catalogue"
        doc_kind, doc_labels = documented[name]
        assert doc_kind in (None, kind), f"{name}: documented as {doc_kind}, is a {kind}"
        assert doc_labels == labels, f"{name}: documented labels {doc_labels}, has {labels}"


def test_the_catalogue_documents_no_metric_that_does_not_exist() -> None:
    missing = sorted(set(_documented()) - set(_registered()))
    assert not missing, f"documented but never registered: {missing}"


def test_every_label_value_the_code_can_emit_is_documented() -> None:
    doc = metrics.__doc__ or ""
    values = {*metrics.FAIL_REASONS, *metrics.SKIP_REASONS, *metrics.FENCED_OPERATIONS,
              *metrics.REAP_OUTCOMES, *metrics.LEASE_KINDS}
    undocumented = sorted(value for value in values if f"``{value}``" not in doc)
    assert not undocumented, f"label values emitted but not documented: {undocumented}"
