"""The printed table and the JSON record of one benchmark run.

Ratios are what the targets in the issues are written in: the primary system
against each peer at the same setting, and every throughput against the
database's own single-row UPDATE rate measured in the same run (with one
client for the one-connection rows, four for the rest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bench import measure


@dataclasses.dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    # Which UPDATE-rate baseline (number of clients) it is held against, if any.
    update_clients: int | None


METRICS: tuple[Metric, ...] = (
    Metric("enqueue_single", "enqueue, one per transaction", "jobs/s", True, 1),
    Metric("enqueue_batch", "enqueue, batch API", "jobs/s", True, 1),
    Metric("enqueue_batch_cpu", "batch API, client CPU per 1k", "ms", False, None),
    Metric("e2e_c1", "end-to-end, concurrency 1", "jobs/s", True, 1),
    Metric("e2e_c4", "end-to-end, concurrency 4", "jobs/s", True, 4),
    Metric("e2e_best", "end-to-end, own best setting", "jobs/s", True, 4),
    Metric("latency_p50", "enqueue-to-start p50", "ms", False, None),
    Metric("latency_p99", "enqueue-to-start p99", "ms", False, None),
    Metric("rss_idle", "idle worker RSS", "MiB", False, None),
)

BASELINES: tuple[tuple[str, str], ...] = (
    ("update", "single-row UPDATE (autocommit)"),
    ("advisory", "pg_try_advisory_lock + unlock"),
)

# runs[system][metric] -> one value per repetition
Runs = dict[str, dict[str, list[float]]]


def medians(runs: Runs) -> dict[str, dict[str, float]]:
    return {
        name: {key: measure.median(values) for key, values in metrics.items() if values}
        for name, metrics in runs.items()
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("ms", "MiB"):
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render(
    *,
    systems: Sequence[str],
    primary: str | None,
    system_runs: Runs,
    baseline_runs: Runs,
) -> str:
    """Both tables as text: systems (with ratios), then the database baselines."""
    med = medians(system_runs)
    base = medians(baseline_runs)
    update = base.get("update", {})
    peers = [s for s in systems if s != primary] if primary else []
    header = ["metric", "unit", *systems]
    header += [f"{primary}/{peer}" for peer in peers]
    header += [f"{s}/UPDATE" for s in systems]
    rows = []
    for metric in METRICS:
        values = {s: med.get(s, {}).get(metric.key) for s in systems}
        if all(v is None for v in values.values()):
            continue
        row = [metric.label, metric.unit, *(_fmt(values[s], metric.unit) for s in systems)]
        row += [_ratio(values[primary], values[peer]) for peer in peers] if primary else []
        ref = update.get(str(metric.update_clients)) if metric.update_clients else None
        row += [_ratio(values[s], ref) for s in systems]
        rows.append(row)
    parts = []
    if rows:
        parts.append(_table(header, rows))
        parts.append(
            "Medians of the repetitions. Lower is better for ms and MiB (a ratio below 1x"
            " favours the first system). /UPDATE: against the single-row UPDATE rate with"
            " 1 client (enqueue, concurrency 1) or 4 clients (concurrency 4, best)."
        )
    brows = []
    kinds = [
        *BASELINES,
        *(
            (k, f"{k.split(':', 1)[1]} lease acquire + release")
            for k in base
            if k.startswith("lease:")
        ),
    ]
    for kind, label in kinds:
        if kind not in base:
            continue
        one, four = base[kind].get("1"), base[kind].get("4")
        brows.append(
            [
                label,
                _fmt(one, "ops/s"),
                _fmt(four, "ops/s"),
                _ratio(one, update.get("1")),
                _ratio(four, update.get("4")),
                _ratio(one, base.get("advisory", {}).get("1")),
                _ratio(four, base.get("advisory", {}).get("4")),
            ]
        )
    if brows:
        parts.append(
            _table(
                [
                    "database baseline (ops/s)",
                    "1 client",
                    "4 clients",
                    "/UPDATE 1",
                    "/UPDATE 4",
                    "/advisory 1",
                    "/advisory 4",
                ],
                brows,
            )
        )
    return "\n\n".join(parts)
