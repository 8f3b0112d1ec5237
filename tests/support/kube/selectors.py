"""Label and field selectors, as the API server evaluates them on list and watch.

kmock filters objects by resource, namespace and name only. Our operator and
kubectl select by labels (``kubectl get -l``, the pods of one worker pool) and
by fields (``kubectl delete --wait`` watches ``metadata.name=<name>``), so both
grammars live here: label selectors with ``=``, ``==``, ``!=``, ``in``,
``notin``, existence and ``!`` non-existence; field selectors with ``=``,
``==``, ``!=`` on any dotted path (the real server allows only a few paths per
resource; allowing all of them only accepts more, never answers differently).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Selector = Callable[[Mapping[str, Any]], bool]


class SelectorError(ValueError):
    """An unparseable selector (the API answers 400 BadRequest)."""


def _split_requirements(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


_SET_RE = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)$")
_EQ_RE = re.compile(r"^(?P<key>[^\s!=]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s]*)$")


def _label_requirement(text: str) -> Selector:
    if match := _SET_RE.match(text):
        key, values = match["key"], {v.strip() for v in match["values"].split(",") if v.strip()}
        if match["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ_RE.match(text):
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if text.startswith("!") and re.fullmatch(r"[^\s!=(),]+", text[1:]):
        key = text[1:]
        return lambda labels: key not in labels
    if re.fullmatch(r"[^\s!=(),]+", text):
        return lambda labels: text in labels
    raise SelectorError(f"unable to parse requirement: {text!r}")


def label_selector(text: str | None) -> Selector:
    """Compile ``?labelSelector=`` into a predicate on a whole object."""
    requirements = [_label_requirement(part) for part in _split_requirements(text or "")]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str | None:
    """The value at a dotted path, rendered the way field selectors compare it (as text)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def field_selector(text: str | None) -> Selector:
    """Compile ``?fieldSelector=`` into a predicate on a whole object."""
    checks: list[Selector] = []
    for part in _split_requirements(text or ""):
        match = _EQ_RE.match(part)
        if match is None:
            raise SelectorError(f"invalid field selector: {part!r}")
        path, op, value = match["key"], match["op"], match["value"]

        def check(
            obj: Mapping[str, Any], path: str = path, op: str = op, value: str = value
        ) -> bool:
            actual = field_value(obj, path) or ""
            return actual != value if op == "!=" else actual == value

        checks.append(check)
    return lambda obj: all(check(obj) for check in checks)
