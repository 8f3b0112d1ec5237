"""The metric names and labels Jobwarden exports, read from the docstring of
operator/jobwarden/observability/metrics.py, and a PromQL checker against them.

Why the docstring: it is the documented contract (one place that lists every
metric, its type and labels); dashboards and alert rules may only use what it
promises. The module's registry is compared with it in a test as well, so the
docstring cannot drift from the code either.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
METRICS_PY = ROOT / "operator" / "jobwarden" / "observability" / "metrics.py"

#: Labels Prometheus attaches to every scraped series (target labels), plus the
#: "cluster" external label and the "pool" label the chart's PodMonitor adds.
TARGET_LABELS = frozenset(
    {"cluster", "namespace", "pod", "instance", "job", "container", "service", "endpoint", "pool"}
)

#: Series Prometheus itself produces for every target; only "up" is used (operator down).
SYNTHETIC = {"up": frozenset()}


@dataclass(frozen=True)
class Metric:
    name: str
    type: str
    labels: frozenset[str]


@dataclass
class Catalog:
    metrics: dict[str, Metric] = field(default_factory=dict)

    def series(self) -> dict[str, frozenset[str]]:
        """Every series name a query may select, with its labels."""
        out: dict[str, frozenset[str]] = dict(SYNTHETIC)
        for metric in self.metrics.values():
            if metric.type == "histogram":
                out[f"{metric.name}_bucket"] = metric.labels | {"le"}
                out[f"{metric.name}_sum"] = metric.labels
                out[f"{metric.name}_count"] = metric.labels
            else:
                out[metric.name] = metric.labels
        return out


def documented() -> Catalog:
    tree = ast.parse(METRICS_PY.read_text())
    doc = ast.get_docstring(tree) or ""
    catalog = Catalog()
    row = re.compile(r"^(jobwarden_\w+)\s+(counter|gauge|histogram)\s+(.*)$")
    for line in doc.splitlines():
        match = row.match(line.strip())
        if match:
            name, kind, labels = match.groups()
            names = (
                frozenset()
                if "(none)" in labels
                else frozenset(part.strip() for part in labels.split(",") if part.strip())
            )
            catalog.metrics[name] = Metric(name, kind, names)
    # Prose entries: ``jobwarden_x_total{a, b}``; a *_seconds one is a histogram.
    for name, labels in re.findall(r"``(jobwarden_\w+)\{([^}]*)\}``", doc):
        kind = (
            "histogram"
            if name.endswith("_seconds")
            else ("counter" if name.endswith("_total") else "gauge")
        )
        catalog.metrics.setdefault(
            name, Metric(name, kind, frozenset(p.strip() for p in labels.split(",")))
        )
    return catalog


GRAFANA_VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def substitute_grafana_variables(expr: str) -> str:
    """Make a dashboard query plain PromQL: ranges get a duration, others a literal."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in ("__rate_interval", "__interval", "__range", "__range_s"):
            return "5m"
        return "x"

    return GRAFANA_VARIABLE.sub(value, expr)


def check(expr: str, catalog: Catalog) -> list[str]:
    """Parse ``expr`` and list every unknown metric or label it uses.

    Raises ``ValueError`` (from the parser) when the expression is not PromQL.
    """
    import promql_parser as pp

    series = catalog.series()
    problems: list[str] = []

    def selectors(node: Any) -> list[Any]:
        found: list[Any] = []

        def visit(n: Any) -> None:
            if isinstance(n, pp.VectorSelector):
                found.append(n)
            elif isinstance(n, pp.MatrixSelector):
                visit(n.vector_selector)
            elif isinstance(n, pp.BinaryExpr):
                visit(n.lhs)
                visit(n.rhs)
            elif isinstance(n, pp.AggregateExpr):
                visit(n.expr)
                if n.param is not None:
                    visit(n.param)
            elif isinstance(n, pp.Call):
                for arg in n.args:
                    visit(arg)
            elif isinstance(n, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
                visit(n.expr)

        visit(node)
        return found

    def labels_of(selector: Any) -> frozenset[str]:
        return series.get(selector.name, frozenset())

    def visit(n: Any) -> None:
        if isinstance(n, pp.VectorSelector):
            if n.name not in series:
                problems.append(f"unknown metric {n.name}")
                return
            for matcher in n.matchers.matchers:
                if matcher.name not in labels_of(n) | TARGET_LABELS:
                    problems.append(f"{n.name} has no label {matcher.name}")
        elif isinstance(n, pp.AggregateExpr) and n.modifier is not None:
            allowed = TARGET_LABELS.union(*(labels_of(s) for s in selectors(n.expr)))
            for label in n.modifier.labels:
                if label not in allowed:
                    problems.append(f"aggregation by unknown label {label}")
        for child in children(n):
            visit(child)

    def children(n: Any) -> list[Any]:
        if isinstance(n, pp.MatrixSelector):
            return [n.vector_selector]
        if isinstance(n, pp.BinaryExpr):
            return [n.lhs, n.rhs]
        if isinstance(n, pp.AggregateExpr):
            return [n.expr] + ([n.param] if n.param is not None else [])
        if isinstance(n, pp.Call):
            return list(n.args)
        if isinstance(n, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
            return [n.expr]
        return []

    visit(pp.parse(expr))
    return problems
