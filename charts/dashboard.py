"""Generate charts/jobwarden/dashboards/jobwarden.json from code, with Grafana's typed SDK.

Why code and not hand-kept JSON: a dashboard edited by hand drifts (a panel
copied with another panel's unit, a selector missing a variable, a threshold
lost in a merge), and its JSON is not reviewable. Here every panel is one call
of a small helper (``stat``, ``series``, ``bars``) over the typed builders of
``grafana-foundation-sdk`` (Grafana's own SDK, generated from Grafana's
schemas: a misspelled option is an AttributeError, not a silently ignored
key), and every query's label selector comes from one place (:data:`SELECTORS`).

Run ``python charts/dashboard.py`` after a change; tests/chart checks that the
committed JSON is exactly what this code generates. The SDK is a development
dependency only (the ``test`` extra): the chart ships the generated JSON.

Selectors in queries: ``@WQ`` (worker metrics: cluster, namespace, pool and
queue), ``@W`` (worker metrics without a queue label), ``@CQ`` / ``@CP`` / ``@C``
(the operator's database-wide gauges: cluster plus queue / pool, never
namespace: see docs/dashboard.md).
"""

# ruff: noqa: E501 -- a query stays on one line, as Grafana shows it and grep finds it
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.builders import stat as stats
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models

OUTPUT = Path(__file__).resolve().parent / "jobwarden" / "dashboards" / "jobwarden.json"

_WORKER = 'cluster=~"$cluster", namespace=~"$namespace", pool=~"$pool"'
#: Placeholders of the queries' label selectors (longest first: "@WQ" before "@W").
SELECTORS = {
    "@WQ": _WORKER + ', queue=~"$queue"',
    "@W": _WORKER,
    "@CQ": 'cluster=~"$cluster", queue=~"$queue"',
    "@CP": 'cluster=~"$cluster", pool=~"$pool"',
    "@C": 'cluster=~"$cluster"',
}
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")


def expr(text: str) -> str:
    for placeholder, selector in SELECTORS.items():
        text = text.replace(placeholder, selector)
    return text


def q(text: str, legend: str, *, instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr(text)).legend_format(legend) \
        .datasource(DATASOURCE)
    return query.instant() if instant else query


def _with_targets(panel: Any, targets: list[prometheus.Dataquery]) -> Any:
    for index, target in enumerate(targets):
        panel = panel.with_target(target.ref_id(chr(ord("A") + index)))
    return panel


def _common(panel: Any, title: str, description: str, unit: str | None, w: int, h: int,
            targets: list[prometheus.Dataquery]) -> Any:
    panel = panel.title(title).description(description).datasource(DATASOURCE) \
        .span(w).height(h)
    if unit:
        panel = panel.unit(unit)
    return _with_targets(panel, targets)


def _reduce() -> common.ReduceDataOptions:
    return common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def row(title: str) -> Callable[[dashboard.Dashboard], dashboard.Dashboard]:
    return lambda board: board.with_row(dashboard.Row(title))


def stat(title: str, description: str, *, unit: str, w: int, h: int,
               targets: list[prometheus.Dataquery], steps: list[tuple[str, float | None]],
               background: bool, graph: bool, names: dict[str, tuple[str, str]] | None = None,
               ) -> Callable[[dashboard.Dashboard], dashboard.Dashboard]:
    """A single value, coloured by ``steps`` (threshold colours, the first from -inf)."""
    panel = _common(stats.Panel(), title, description, unit, w, h, targets) \
        .reduce_options(_reduce()) \
        .color_mode(common_models.BigValueColorMode.BACKGROUND if background
                    else common_models.BigValueColorMode.VALUE) \
        .graph_mode(common_models.BigValueGraphMode.AREA if graph
                    else common_models.BigValueGraphMode.NONE) \
        .text_mode(common_models.BigValueTextMode.VALUE) \
        .color_scheme(dashboard.FieldColor().mode(models.FieldColorModeId.THRESHOLDS)) \
        .thresholds(dashboard.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(
            [models.Threshold(color=color, value=value) for color, value in steps]))
    if names:
        panel = panel.mappings([models.ValueMap(options={
            value: models.ValueMappingResult(text=text, color=color, index=index)
            for index, (value, (text, color)) in enumerate(names.items())})])
    return lambda board: board.with_panel(panel)


def series(title: str, description: str, *, unit: str, w: int, h: int,
           targets: list[prometheus.Dataquery], stacked: bool = False,
           ) -> Callable[[dashboard.Dashboard], dashboard.Dashboard]:
    """Lines over time, with a table legend of mean and max."""
    panel = _common(timeseries.Panel(), title, description, unit, w, h, targets) \
        .stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL if stacked
                                               else common_models.StackingMode.NONE)) \
        .legend(common.VizLegendOptions().display_mode(common_models.LegendDisplayMode.TABLE)
                .placement(common_models.LegendPlacement.BOTTOM).show_legend(True)
                .calcs(["mean", "max"])) \
        .tooltip(common.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                 .sort(common_models.SortOrder.NONE))
    return lambda board: board.with_panel(panel)


def bars(title: str, description: str, *, unit: str, w: int, h: int,
         targets: list[prometheus.Dataquery]) -> Callable[[dashboard.Dashboard],
                                                           dashboard.Dashboard]:
    """The last value of each series as a bar (a top list)."""
    panel = _common(bargauge.Panel(), title, description, unit, w, h, targets) \
        .reduce_options(_reduce())
    return lambda board: board.with_panel(panel)


def variable(name: str, label: str, query: str, description: str = "",
             ) -> dashboard.QueryVariable:
    found = dashboard.QueryVariable(name).label(label).datasource(DATASOURCE) \
        .query(query).refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED) \
        .include_all(True).multi(True).all_value(".*") \
        .sort(models.VariableSort.ALPHABETICAL_ASC) \
        .current(models.VariableOption(selected=True, text=["All"], value=["$__all"]))
    return found.description(description) if description else found


def build() -> dict[str, Any]:
    board = dashboard.Dashboard("Jobwarden").uid("jobwarden") \
        .description("Jobwarden jobs, queues, leases, schedules, hosts and rollouts. "
                     "Metric names: operator/jobwarden/observability/metrics.py.") \
        .tags(["jobwarden"]).timezone("browser").editable().tooltip(
            models.DashboardCursorSync.CROSSHAIR).refresh("30s").time("now-6h", "now") \
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source")
                       .type("prometheus")) \
        .with_variable(variable(
            "cluster", "Cluster", "label_values(jobwarden_db_up, cluster)",
            "The cluster label the chart's ServiceMonitor and PodMonitor add "
            "(metrics.clusterLabel, value operator.clusterName). All (.*) also matches "
            "series without it.")) \
        .with_variable(variable("namespace", "Namespace",
                                'label_values(jobwarden_db_up{cluster=~"$cluster"}, namespace)')) \
        .with_variable(variable("pool", "Pool", "label_values(jobwarden_worker_slots{"
                                'cluster=~"$cluster", namespace=~"$namespace"}, pool)')) \
        .with_variable(variable("queue", "Queue",
                                'label_values(jobwarden_queue_depth{cluster=~"$cluster"}, queue)'))
    for add in PANELS:
        board = add(board)
    built = board.build()
    for index, panel in enumerate(built.panels or [], start=1):
        panel.id_val = index  # stable ids: Grafana links and tests name panels by them
    encoded = dict(json.loads(JSONEncoder(sort_keys=True).encode(built)))
    for item in encoded["templating"]["list"]:
        if item["type"] == "query":  # what Grafana's editor shows; the SDK has no setter
            item["definition"] = item["query"]
    return encoded


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


PANELS: list[Callable[[dashboard.Dashboard], dashboard.Dashboard]] = [
    row('Overview'),
    stat('Jobs completed / s', '', unit='ops', w=4, h=4,
        targets=[
            q('sum(rate(jobwarden_jobs_completed_total{@WQ}[$__rate_interval]))', 'completed', instant=True),
        ],
        steps=[('green', None)], background=False, graph=True),
    stat('Jobs failed / s', '', unit='ops', w=4, h=4,
        targets=[
            q('sum(rate(jobwarden_jobs_failed_total{@WQ}[$__rate_interval]))', 'failed', instant=True),
        ],
        steps=[('green', None), ('orange', 0.001), ('red', 1)], background=True, graph=True),
    stat('Jobs running', '', unit='short', w=4, h=4,
        targets=[
            q('sum(jobwarden_jobs_running{@WQ})', 'running', instant=True),
        ],
        steps=[('blue', None)], background=False, graph=True),
    stat('Pending jobs', '', unit='short', w=4, h=4,
        targets=[
            q('sum(jobwarden_queue_depth{@CQ, status="pending"})', 'pending', instant=True),
        ],
        steps=[('green', None), ('orange', 1000), ('red', 10000)], background=True, graph=True),
    stat('Hosts draining', '', unit='short', w=4, h=4,
        targets=[
            q('sum(jobwarden_host_draining{@W})', 'draining', instant=True),
        ],
        steps=[('green', None), ('orange', 1)], background=True, graph=True),
    stat('Database reachable', '', unit='bool_yes_no', w=4, h=4,
        targets=[
            q('min(jobwarden_db_up{@W})', 'db up', instant=True),
        ],
        steps=[('red', None), ('green', 1)], background=True, graph=False, names={'0': ('no', 'red'), '1': ('yes', 'green')}),
    row('Throughput and failures'),
    series('Throughput by outcome', 'Attempts finished per second, by how they ended.', unit='ops', w=12, h=8,
        targets=[
            q('sum(rate(jobwarden_jobs_completed_total{@WQ}[$__rate_interval]))', 'completed'),
            q('sum(rate(jobwarden_jobs_failed_total{@WQ}[$__rate_interval]))', 'failed'),
            q('sum(rate(jobwarden_jobs_retried_total{@WQ}[$__rate_interval]))', 'retried'),
            q('sum(rate(jobwarden_jobs_skipped_total{@WQ}[$__rate_interval]))', 'skipped'),
            q('sum(rate(jobwarden_jobs_deferred_total{@WQ}[$__rate_interval]))', 'deferred'),
            q('sum(rate(jobwarden_jobs_interrupted_total{@WQ}[$__rate_interval]))', 'interrupted'),
            q('sum(rate(jobwarden_jobs_cancelled_total{@WQ}[$__rate_interval]))', 'cancelled'),
        ], stacked=True),
    series('Enqueued by queue', '', unit='ops', w=12, h=8,
        targets=[
            q('sum by (queue) (rate(jobwarden_jobs_enqueued_total{@WQ}[$__rate_interval]))', '{{queue}}'),
        ]),
    series('Failures by reason', '', unit='ops', w=8, h=8,
        targets=[
            q('sum by (reason) (rate(jobwarden_jobs_failed_total{@WQ}[$__rate_interval]))', '{{reason}}'),
        ]),
    series('Retries by reason', '', unit='ops', w=8, h=8,
        targets=[
            q('sum by (reason) (rate(jobwarden_jobs_retried_total{@WQ}[$__rate_interval]))', '{{reason}}'),
        ]),
    bars('Top failing job classes', "Failed jobs over the dashboard's time range.", unit='short', w=8, h=8,
        targets=[
            q('topk(10, sum by (job_class) (increase(jobwarden_jobs_failed_total{@WQ}[$__range])))', '{{job_class}}', instant=True),
        ]),
    row('Queues'),
    series('Queue depth by status', 'Database-wide, exported once by the operator.', unit='short', w=12, h=8,
        targets=[
            q('sum by (queue, status) (jobwarden_queue_depth{@CQ})', '{{queue}} {{status}}'),
        ]),
    series('Oldest due pending job', '', unit='s', w=12, h=8,
        targets=[
            q('max by (queue) (jobwarden_queue_oldest_pending_seconds{@CQ})', '{{queue}}'),
        ]),
    series('Queue wait (due to claimed)', '', unit='s', w=8, h=8,
        targets=[
            q('histogram_quantile(0.5, sum by (queue, le) (rate(jobwarden_job_queue_wait_seconds_bucket{@WQ}[$__rate_interval])))', 'p50 {{queue}}'),
            q('histogram_quantile(0.95, sum by (queue, le) (rate(jobwarden_job_queue_wait_seconds_bucket{@WQ}[$__rate_interval])))', 'p95 {{queue}}'),
            q('histogram_quantile(0.99, sum by (queue, le) (rate(jobwarden_job_queue_wait_seconds_bucket{@WQ}[$__rate_interval])))', 'p99 {{queue}}'),
        ]),
    series('Running jobs and slots', '', unit='short', w=8, h=8,
        targets=[
            q('sum by (queue) (jobwarden_jobs_running{@WQ})', 'running {{queue}}'),
            q('sum(jobwarden_worker_slots{@W})', 'slots'),
        ]),
    series('Job duration p95 by class', '', unit='s', w=8, h=8,
        targets=[
            q('histogram_quantile(0.95, sum by (job_class, le) (rate(jobwarden_job_duration_seconds_bucket{@WQ}[$__rate_interval])))', '{{job_class}}'),
        ]),
    row('Leases'),
    series('Lease lost', '', unit='ops', w=6, h=8,
        targets=[
            q('sum by (kind) (rate(jobwarden_lease_lost_total{@W}[$__rate_interval]))', '{{kind}}'),
        ]),
    series('Lease busy', '', unit='ops', w=6, h=8,
        targets=[
            q('sum by (kind) (rate(jobwarden_lease_busy_total{@W}[$__rate_interval]))', '{{kind}}'),
        ]),
    series('Deferred and skipped jobs', '', unit='ops', w=6, h=8,
        targets=[
            q('sum(rate(jobwarden_jobs_deferred_total{@WQ}[$__rate_interval]))', 'deferred'),
            q('sum by (reason) (rate(jobwarden_jobs_skipped_total{@WQ}[$__rate_interval]))', 'skipped {{reason}}'),
        ]),
    series('Leases held', '', unit='short', w=6, h=8,
        targets=[
            q('sum by (kind) (jobwarden_leases_held{@W})', '{{kind}}'),
        ]),
    row('Schedules'),
    series('Slots enqueued / missed / skipped', 'Every slot ends with a recorded fate; missed and skipped slots are the ones that did not run.', unit='short', w=8, h=8,
        targets=[
            q('sum by (schedule) (increase(jobwarden_schedule_slots_enqueued_total{@C}[$__rate_interval]))', 'enqueued {{schedule}}'),
            q('sum by (schedule) (increase(jobwarden_schedule_slots_missed_total{@C}[$__rate_interval]))', 'missed {{schedule}}'),
            q('sum by (schedule) (increase(jobwarden_schedule_slots_skipped_total{@C}[$__rate_interval]))', 'skipped {{schedule}}'),
        ]),
    bars('Time since last success', '', unit='s', w=8, h=8,
        targets=[
            q('max by (schedule) (jobwarden_schedule_seconds_since_success{@C})', '{{schedule}}', instant=True),
        ]),
    series('Schedule lag and runner passes', '', unit='short', w=8, h=8,
        targets=[
            q('max by (schedule) (jobwarden_schedule_lag_seconds{@C})', 'lag {{schedule}}'),
            q('sum by (result) (rate(jobwarden_schedule_runs_total{@C}[$__rate_interval]))', 'runner {{result}}'),
        ]),
    row('Reliability'),
    series('Reaped jobs by outcome', 'Running jobs whose heartbeats stopped (worker crash, OOM kill, node loss).', unit='ops', w=8, h=8,
        targets=[
            q('sum by (outcome) (rate(jobwarden_jobs_reaped_total{@WQ}[$__rate_interval]))', '{{outcome}}'),
        ]),
    series('Fenced writes by operation', 'Writes refused because the claim had moved on: a stale worker was stopped from recording an outcome.', unit='ops', w=8, h=8,
        targets=[
            q('sum by (operation) (rate(jobwarden_jobs_fenced_total{@WQ}[$__rate_interval]))', '{{operation}}'),
        ]),
    series('Operator reconciles and errors', '', unit='ops', w=8, h=8,
        targets=[
            q('sum by (kind, result) (rate(jobwarden_operator_reconciles_total{@C}[$__rate_interval]))', '{{kind}} {{result}}'),
            q('sum by (kind) (rate(jobwarden_operator_errors_total{@C}[$__rate_interval]))', 'errors {{kind}}'),
        ]),
    row('Hosts, drains and rollouts'),
    series('Hosts by pool and state', '', unit='short', w=8, h=8,
        targets=[
            q('sum by (pool, state) (jobwarden_hosts{@CP})', '{{pool}} {{state}}'),
        ], stacked=True),
    series('Hosts draining', '', unit='short', w=8, h=8,
        targets=[
            q('sum by (pool) (jobwarden_host_draining{@W})', '{{pool}}'),
        ]),
    series('Drain duration', '', unit='s', w=8, h=8,
        targets=[
            q('histogram_quantile(0.5, sum by (pool, le) (rate(jobwarden_drain_duration_seconds_bucket{@W}[$__rate_interval])))', 'p50 {{pool}}'),
            q('histogram_quantile(0.95, sum by (pool, le) (rate(jobwarden_drain_duration_seconds_bucket{@W}[$__rate_interval])))', 'p95 {{pool}}'),
        ]),
    series('Rollout duration', '', unit='s', w=12, h=8,
        targets=[
            q('histogram_quantile(0.5, sum by (pool, le) (rate(jobwarden_rollout_duration_seconds_bucket{@CP}[$__rate_interval])))', 'p50 {{pool}}'),
            q('histogram_quantile(0.95, sum by (pool, le) (rate(jobwarden_rollout_duration_seconds_bucket{@CP}[$__rate_interval])))', 'p95 {{pool}}'),
        ]),
    series('Jobs left to the reaper by rollouts', 'Jobs still running when a draining host hit its drain timeout.', unit='short', w=12, h=8,
        targets=[
            q('sum by (pool) (increase(jobwarden_rollout_reaped_jobs_total{@CP}[$__rate_interval]))', '{{pool}}'),
        ]),
    row('Pod runs'),
    series('Pod start latency', "From the operator's claim of a pod run (spec.podTemplate) to its container running: scheduling and image pull.", unit='s', w=8, h=8,
        targets=[
            q('histogram_quantile(0.5, sum by (kind, le) (rate(jobwarden_pod_run_start_seconds_bucket{@C}[$__rate_interval])))', 'p50 {{kind}}', instant=True),
            q('histogram_quantile(0.95, sum by (kind, le) (rate(jobwarden_pod_run_start_seconds_bucket{@C}[$__rate_interval])))', 'p95 {{kind}}', instant=True),
        ]),
    series('Pod run failures by cause', 'Pod runs that ended without the job recording its outcome: never started (image_pull, unschedulable, start_deadline), died (oom_killed, evicted, node_lost, killed), deleted, replaced, or not created (error).', unit='short', w=8, h=8,
        targets=[
            q('sum by (cause) (increase(jobwarden_pod_run_failures_total{@C}[$__rate_interval]))', '{{cause}}', instant=True),
        ], stacked=True),
    series('Pod runs by resource', 'Pods created per JobSchedule / ExclusiveJob with a pod template.', unit='short', w=8, h=8,
        targets=[
            q('sum by (kind, resource) (increase(jobwarden_pod_runs_total{@C}[$__rate_interval]))', '{{kind}} {{resource}}', instant=True),
        ], stacked=True),
]


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is not what charts/dashboard.py generates: run it", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
