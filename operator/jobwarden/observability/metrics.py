"""Every Prometheus metric Jobwarden exports, in one place.

Why one module: dashboards and alert rules are tested against these names, and
a metric defined next to the code that bumps it tends to drift (a renamed label,
a second spelling). Labels are kept low-cardinality on purpose: ``queue``,
``job_class``, ``reason``, ``kind``, ``schedule``, ``pool`` -- never a job id,
a host-unique value in a counter, a DSN or a payload.

Worker processes (``jobwarden worker``) export:

================================================  =========  ==============================
name                                              type       labels
================================================  =========  ==============================
jobwarden_jobs_enqueued_total                     counter    queue, job_class
jobwarden_jobs_completed_total                    counter    queue, job_class
jobwarden_jobs_failed_total                       counter    queue, job_class, reason
jobwarden_jobs_retried_total                      counter    queue, job_class, reason
jobwarden_jobs_skipped_total                      counter    queue, job_class, reason
jobwarden_jobs_deferred_total                     counter    queue, job_class
jobwarden_jobs_interrupted_total                  counter    queue, job_class
jobwarden_jobs_cancelled_total                    counter    queue, job_class
jobwarden_jobs_fenced_total                       counter    queue, job_class, operation
jobwarden_jobs_reaped_total                       counter    queue, job_class, outcome
jobwarden_lease_lost_total                        counter    kind
jobwarden_lease_busy_total                        counter    kind
jobwarden_leases_held                             gauge      kind
jobwarden_job_duration_seconds                    histogram  queue, job_class
jobwarden_job_queue_wait_seconds                  histogram  queue
jobwarden_jobs_running                            gauge      queue
jobwarden_worker_slots                            gauge      (none)
jobwarden_host_draining                           gauge      pool
jobwarden_host_draining_seconds                   gauge      pool
jobwarden_drain_duration_seconds                  histogram  pool
jobwarden_db_up                                   gauge      (none)
jobwarden_build_info                              gauge      version
jobwarden_schedule_slots_enqueued_total           counter    schedule
jobwarden_schedule_slots_missed_total             counter    schedule
jobwarden_schedule_slots_skipped_total            counter    schedule
jobwarden_schedule_runs_total                     counter    result
jobwarden_retention_deleted_total                 counter    status
================================================  =========  ==============================

``jobwarden_build_info`` is 1 in every process that serves /metrics (worker,
operator), its ``version`` label the release the process runs
(:mod:`jobwarden.version`): during a rolling upgrade ``count by (version)
(jobwarden_build_info)`` shows how many processes of each release are up
(docs/upgrades.md).

``jobwarden_retention_deleted_total`` moves only in the one process (worker or
operator) that holds the ``maintenance:retention`` lease while it deletes
(:mod:`jobwarden.maintenance.retention`); every process exports it at 0 for each finished
status.

The database-wide gauges are exported once per database, by the one process
(the operator, or a worker that serves /metrics) that holds the
``jobwarden:gauges`` lease (:mod:`jobwarden.maintenance.gauges`), never by every pod, so a
sum over pods never multiplies them:

================================================  =========  ==============================
jobwarden_queue_depth                             gauge      queue, status
jobwarden_queue_oldest_pending_seconds            gauge      queue
jobwarden_schedule_seconds_since_success          gauge      schedule
jobwarden_schedule_lag_seconds                    gauge      schedule
jobwarden_schedule_suspended                      gauge      schedule
jobwarden_schedule_period_seconds                 gauge      schedule
jobwarden_schedule_seconds_without_success        gauge      schedule
jobwarden_hosts                                   gauge      pool, state
jobwarden_db_dead_tuples                          gauge      table
jobwarden_db_live_tuples                          gauge      table
jobwarden_db_autovacuum_enabled                   gauge      table
jobwarden_db_seconds_since_vacuum                 gauge      table
jobwarden_db_table_bytes                          gauge      table, kind
jobwarden_schedule_slots_total                    counter    schedule, fate
================================================  =========  ==============================

The ``jobwarden_db_*`` gauges describe the hot tables (jobs, job_attempts,
leases, hosts, workers) from the server's statistics: dead and live tuples,
whether autovacuum can run on the table (1: the server's ``autovacuum`` and
``track_counts`` are on and the table's ``autovacuum_enabled`` is not false),
seconds since its last (auto)vacuum (absent: never since the statistics were
reset), and its size (``kind``: ``table`` or ``indexes``).

``jobwarden_schedule_slots_total`` is every schedule slot's fate (``enqueued``,
``skipped``, ``missed``, ``replaced``, ``dropped``, ``deferred``; docs/schedules.md),
read from the counts on the schedule rows -- the one place each fate is recorded,
by the statement that decided it -- so it matches ``JobSchedule`` status, survives
process restarts and is exported once per database; every fate of every schedule
is there from the first export, at 0 until it happens. The per-process
``jobwarden_schedule_slots_{enqueued,missed,skipped}_total`` counters are kept
for existing dashboards.

The operator also exports ``jobwarden_operator_reconciles_total{kind, result}``,
``jobwarden_operator_errors_total{kind}``,
``jobwarden_operator_passes_skipped_total{kind}`` (resync passes not run: the object's
database digest had not changed; docs/operator.md), ``jobwarden_rollout_duration_seconds{pool}``
and ``jobwarden_rollout_reaped_jobs_total{pool}``, and for runs in pods of their own
(``spec.podTemplate``; ``kind`` is JobSchedule or ExclusiveJob, ``resource``
``<namespace>/<name>``, one series per resource as a schedule has):

================================================  =========  ==============================
jobwarden_pool_drain_timeout_seconds              gauge      pool
jobwarden_resource_ready                          gauge      kind, resource
jobwarden_pod_runs_total                          counter    kind, resource
jobwarden_pod_run_failures_total                  counter    kind, cause
jobwarden_pod_run_start_seconds                   histogram  kind
================================================  =========  ==============================

``jobwarden_resource_ready`` is one series per JobSchedule, ExclusiveJob and
WorkerPool the operator watches (``resource`` ``<namespace>/<name>``), read from the
status the API server holds. Every per-resource series (``jobwarden_pod_runs_total``,
``jobwarden_resource_ready``, a pool's ``jobwarden_pool_drain_timeout_seconds`` and
rollout series, a schedule's slot counters in the operator) is removed when the
operator sees the resource deleted (:func:`forget_resource`), so one-shot
ExclusiveJobs do not grow the scrape without bound.

``cause`` (jobwarden.structs.podruns): ``image_pull``, ``unschedulable``,
``start_deadline`` (never started by the start deadline), ``oom_killed``,
``evicted``, ``node_lost``, ``killed`` (ended without an outcome), ``deleted``,
``replaced``, ``error`` (the pod could not be created). Start latency runs from
the operator's claim to the container running, as the kubelet reports it.

``reason`` values (:mod:`jobwarden.structs.policies`): ``error``, ``timeout``,
``unknown_job``, ``bad_data``, ``lease_busy`` (failed/retried: a job with
``on_busy = "fail"``), ``pod_failure`` (a run in a pod of its own whose pod
failed before the job recorded an outcome); ``lease_busy``, ``on_busy_skip``
(skipped). A failure for
good after the last retry keeps its attempt's reason. ``operation`` of a fenced
write: ``complete``, ``fail``, ``defer``. ``outcome`` of a reap: ``retried``,
``interrupted``, ``failed``. ``kind`` of a lease: ``job``, ``key``, ``schedule``,
``lock``. Slots a schedule's overlap policy skips are counted by
``jobwarden_schedule_slots_skipped_total``, not as skipped jobs.

Rare events are exported at 0 before they happen (``prime_*`` below). A
counter whose label set is born at 1 has no earlier sample, so
``increase(x[15m])`` sees nothing and the first lease loss after a process
start would never alert. Every label set this process can know is therefore
created at 0 when it becomes known: the lease kinds and runner results at
import, a (queue, job class) pair's rare-event counters when the worker starts
(job classes of its queues that are already imported) and again when a job of
that pair is first claimed or reaped, a schedule's slot counters when the
runner or the operator first sees it, a pool's when the operator first
reconciles it. Label sets that are still born at 1 (a class nobody imported
before its first failure) are caught by the alert rules' ``unless ... offset``
clause (docs/alerts.md, "New label sets").
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from jobwarden.observability.meters import Counter, Gauge, Histogram, Registry
from jobwarden.structs import policies
from jobwarden.version import VERSION

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

#: The registry every Jobwarden metric lives in. Separate from prometheus_client's
#: default registry so an application embedding the worker keeps its own metrics
#: apart, and so tests can read values without global state from other libraries.
#: The metrics keep their values without prometheus_client (jobwarden.observability.meters), which
#: is imported only when something collects them: a worker that serves no
#: /metrics never loads it (2.8 MiB of its resident memory).
REGISTRY = Registry()

_JOB = ("queue", "job_class")

JOBS_ENQUEUED = Counter(
    "jobwarden_jobs_enqueued", "Jobs inserted (duplicates by unique key excluded).", _JOB,
    registry=REGISTRY,
)
JOBS_COMPLETED = Counter(
    "jobwarden_jobs_completed", "Attempts recorded as completed.", _JOB, registry=REGISTRY
)
JOBS_FAILED = Counter(
    "jobwarden_jobs_failed", "Jobs that ended in the failed state (no retries left).",
    (*_JOB, "reason"), registry=REGISTRY,
)
JOBS_RETRIED = Counter(
    "jobwarden_jobs_retried", "Failed attempts scheduled for another try.", (*_JOB, "reason"),
    registry=REGISTRY,
)
JOBS_SKIPPED = Counter(
    "jobwarden_jobs_skipped", "Claimed jobs that did not run (busy lease, skip policy).",
    (*_JOB, "reason"), registry=REGISTRY,
)
JOBS_DEFERRED = Counter(
    "jobwarden_jobs_deferred", "Jobs put back to pending because their lease was busy.", _JOB,
    registry=REGISTRY,
)
JOBS_INTERRUPTED = Counter(
    "jobwarden_jobs_interrupted", "Non-idempotent jobs whose worker died mid-run.", _JOB,
    registry=REGISTRY,
)
JOBS_CANCELLED = Counter(
    "jobwarden_jobs_cancelled", "Jobs cancelled before or while running.", _JOB, registry=REGISTRY
)
JOBS_FENCED = Counter(
    "jobwarden_jobs_fenced", "Writes refused because the claim token no longer matched.",
    (*_JOB, "operation"), registry=REGISTRY,
)
JOBS_REAPED = Counter(
    "jobwarden_jobs_reaped", "Processing jobs reclaimed after their heartbeats stopped.",
    (*_JOB, "outcome"), registry=REGISTRY,
)
LEASE_LOST = Counter(
    "jobwarden_lease_lost", "Leases taken over by another owner before their holder finished.",
    ("kind",), registry=REGISTRY,
)
LEASE_BUSY = Counter(
    "jobwarden_lease_busy", "Lease acquisitions refused because another owner held it.",
    ("kind",), registry=REGISTRY,
)
LEASES_HELD = Gauge(
    "jobwarden_leases_held", "Leases currently held by this process.", ("kind",),
    registry=REGISTRY,
)
JOB_DURATION = Histogram(
    "jobwarden_job_duration_seconds", "Wall time of one attempt's perform().", _JOB,
    buckets=(0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
JOB_QUEUE_WAIT = Histogram(
    "jobwarden_job_queue_wait_seconds", "Time from run_at to claim (database clock).",
    ("queue",),
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800),
    registry=REGISTRY,
)
JOBS_RUNNING = Gauge(
    "jobwarden_jobs_running", "Attempts running in this worker process.", ("queue",),
    registry=REGISTRY,
)
WORKER_SLOTS = Gauge(
    "jobwarden_worker_slots", "Concurrency slots of this worker process.", registry=REGISTRY
)
HOST_DRAINING = Gauge(
    "jobwarden_host_draining", "1 while this worker's host is draining.", ("pool",),
    registry=REGISTRY,
)
HOST_DRAINING_SECONDS = Gauge(
    "jobwarden_host_draining_seconds",
    "Seconds since this worker's host began draining (database clock); 0 when not draining.",
    ("pool",), registry=REGISTRY,
)
DRAIN_DURATION = Histogram(
    "jobwarden_drain_duration_seconds", "From drain start until the host was idle.", ("pool",),
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)
DB_UP = Gauge(
    "jobwarden_db_up", "1 while the process can reach the database.", registry=REGISTRY
)
BUILD_INFO = Gauge(
    "jobwarden_build_info", "1, labelled with the release this process runs.", ("version",),
    registry=REGISTRY,
)
SCHEDULE_SLOTS_ENQUEUED = Counter(
    "jobwarden_schedule_slots_enqueued", "Schedule slots turned into a job.", ("schedule",),
    registry=REGISTRY,
)
SCHEDULE_SLOTS_MISSED = Counter(
    "jobwarden_schedule_slots_missed", "Slots not run because of the catch-up rule.",
    ("schedule",), registry=REGISTRY,
)
SCHEDULE_SLOTS_SKIPPED = Counter(
    "jobwarden_schedule_slots_skipped", "Slots not run because of the overlap policy.",
    ("schedule",), registry=REGISTRY,
)


class _DatabaseCounter:
    """A counter whose values are counts kept in the database, set by their exporter.

    Why not a ``Counter``: the count lives on the schedule row (moved by the
    statement that decided each fate, in whichever process); a process only
    mirrors the row's value, which a ``Counter`` cannot be set to.
    """

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def set_all(self, values: dict[tuple[str, ...], float]) -> None:
        """Replace every labelled value at once (label sets not given disappear)."""
        with self._lock:
            self._values = dict(values)

    def clear(self) -> None:
        with self._lock:
            self._values = {}

    def value(self, *labels: str) -> float | None:
        with self._lock:
            return self._values.get(labels)

    def describe(self) -> list[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        return [CounterMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> list[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            for labels, value in sorted(self._values.items()):
                family.add_metric(list(labels), value)
        return [family]


SCHEDULE_SLOTS = _DatabaseCounter(
    "jobwarden_schedule_slots", "Schedule slots by fate (enqueued, skipped, missed, replaced, "
    "dropped, deferred), as counted in the database.", ("schedule", "fate"))
REGISTRY.register(SCHEDULE_SLOTS, name=SCHEDULE_SLOTS.name)
SCHEDULE_RUNS = Counter(
    "jobwarden_schedule_runs", "Schedule runner passes, by result (ok, error).", ("result",),
    registry=REGISTRY,
)

# Database-wide gauges: set only by the holder of the gauge lease (jobwarden.maintenance.gauges).
QUEUE_DEPTH = Gauge(
    "jobwarden_queue_depth", "Jobs per queue and status.", ("queue", "status"),
    registry=REGISTRY,
)
QUEUE_OLDEST_PENDING = Gauge(
    "jobwarden_queue_oldest_pending_seconds", "Age of the oldest due pending job.", ("queue",),
    registry=REGISTRY,
)
SCHEDULE_SINCE_SUCCESS = Gauge(
    "jobwarden_schedule_seconds_since_success",
    "Seconds since a job of this schedule last completed.", ("schedule",), registry=REGISTRY,
)
SCHEDULE_LAG = Gauge(
    "jobwarden_schedule_lag_seconds", "How far the next due slot is behind now (0 if on time).",
    ("schedule",), registry=REGISTRY,
)
SCHEDULE_SUSPENDED = Gauge(
    "jobwarden_schedule_suspended", "1 while the schedule is suspended (no slots run), else 0.",
    ("schedule",), registry=REGISTRY,
)
SCHEDULE_PERIOD = Gauge(
    "jobwarden_schedule_period_seconds",
    "The schedule's longest gap between two consecutive slots (jobwarden.schedules.periods).",
    ("schedule",), registry=REGISTRY,
)
SCHEDULE_WITHOUT_SUCCESS = Gauge(
    "jobwarden_schedule_seconds_without_success",
    "Seconds the schedule has been active without a success: since the latest of its last "
    "success, its creation and its last resume; 0 while suspended.",
    ("schedule",), registry=REGISTRY,
)
HOSTS = Gauge(
    "jobwarden_hosts", "Registered hosts by pool and state (active, draining).",
    ("pool", "state"), registry=REGISTRY,
)
DB_DEAD_TUPLES = Gauge(
    "jobwarden_db_dead_tuples", "Dead tuples in a hot table (server statistics).", ("table",),
    registry=REGISTRY,
)
DB_LIVE_TUPLES = Gauge(
    "jobwarden_db_live_tuples", "Live tuples in a hot table (server statistics).", ("table",),
    registry=REGISTRY,
)
DB_AUTOVACUUM_ENABLED = Gauge(
    "jobwarden_db_autovacuum_enabled",
    "1 when autovacuum can run on the table (server setting and table option), else 0.",
    ("table",), registry=REGISTRY,
)
DB_SECONDS_SINCE_VACUUM = Gauge(
    "jobwarden_db_seconds_since_vacuum", "Seconds since the table's last (auto)vacuum.",
    ("table",), registry=REGISTRY,
)
DB_TABLE_BYTES = Gauge(
    "jobwarden_db_table_bytes", "Size of a hot table (kind=table) or its indexes (indexes).",
    ("table", "kind"), registry=REGISTRY,
)
RETENTION_DELETED = Counter(
    "jobwarden_retention_deleted", "Finished jobs deleted by the retention task, by status.",
    ("status",), registry=REGISTRY,
)
OPERATOR_RECONCILES = Counter(
    "jobwarden_operator_reconciles", "Reconciliations by resource kind and result.",
    ("kind", "result"), registry=REGISTRY,
)
OPERATOR_PASSES_SKIPPED = Counter(
    "jobwarden_operator_passes_skipped",
    "Resync passes not run because the object's database digest had not changed.",
    ("kind",), registry=REGISTRY,
)
OPERATOR_ERRORS = Counter(
    "jobwarden_operator_errors", "Reconciliation errors by resource kind.", ("kind",),
    registry=REGISTRY,
)
ROLLOUT_DURATION = Histogram(
    "jobwarden_rollout_duration_seconds", "Duration of a WorkerPool rollout.", ("pool",),
    buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)
ROLLOUT_REAPED = Counter(
    "jobwarden_rollout_reaped_jobs", "Jobs left to the reaper when a drain timed out.",
    ("pool",), registry=REGISTRY,
)

POOL_DRAIN_TIMEOUT = Gauge(
    "jobwarden_pool_drain_timeout_seconds",
    "A WorkerPool's spec.drainTimeoutSeconds (JobwardenDrainStuck compares drains with it).",
    ("pool",), registry=REGISTRY,
)
RESOURCE_READY = Gauge(
    "jobwarden_resource_ready",
    "1 when a resource is ready, 0 when not (JobSchedule, ExclusiveJob: condition Ready; "
    "WorkerPool: Available and no failure condition); absent while unknown.",
    ("kind", "resource"), registry=REGISTRY,
)

POD_RUNS = Counter(
    "jobwarden_pod_runs", "Pods created for runs in pods of their own, by resource.",
    ("kind", "resource"), registry=REGISTRY,
)
POD_RUN_FAILURES = Counter(
    "jobwarden_pod_run_failures",
    "Pod runs that ended without the job recording its outcome, by cause.",
    ("kind", "cause"), registry=REGISTRY,
)
POD_RUN_START = Histogram(
    "jobwarden_pod_run_start_seconds",
    "From the operator's claim of a pod run to its container running.", ("kind",),
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
    registry=REGISTRY,
)


# -- label sets exported at 0 before their first event ------------------------------

#: Every value each rare-event label can take (the docstring's table, as data).
LEASE_KINDS = ("job", "key", "schedule", "lock")
FAIL_REASONS = policies.FAILURE_REASONS
SKIP_REASONS = policies.SKIP_REASONS
#: What a fenced write was (the worker's recorder writes only these).
FENCED_OPERATIONS = ("complete", "fail", "defer")
REAP_OUTCOMES = ("retried", "interrupted", "failed")
RETENTION_STATUSES = ("completed", "failed", "interrupted", "cancelled")

_primed: set[tuple[str, ...]] = set()
_primed_lock = threading.Lock()


def _first(key: tuple[str, ...]) -> bool:
    if key in _primed:  # the common answer, without the lock (a set read is atomic)
        return False
    with _primed_lock:
        if key in _primed:
            return False
        _primed.add(key)
        return True


def prime_process() -> None:
    """Label sets every process knows from the start: lease kinds, runner results."""
    for kind in LEASE_KINDS:
        LEASE_LOST.labels(kind)
        LEASE_BUSY.labels(kind)
        LEASES_HELD.labels(kind)
    for result in ("ok", "error"):
        SCHEDULE_RUNS.labels(result)
    for status in RETENTION_STATUSES:
        RETENTION_DELETED.labels(status)
    BUILD_INFO.labels(VERSION).set(1)


#: The kinds the operator reconciles (the ``kind`` label of its counters).
OPERATOR_KINDS = ("JobSchedule", "ExclusiveJob", "WorkerPool")


def prime_operator() -> None:
    """The operator's error counter at 0 for every kind, from its start.

    A series born at its first error has no increase to see; a dashboard or a
    rule over it would stay empty (or silent) on the first error after a start.
    """
    for kind in OPERATOR_KINDS:
        OPERATOR_ERRORS.labels(kind)


def prime_job(queue: str, job_class: str) -> None:
    """Export a (queue, job class) pair's rare-event counters at 0 (once per process)."""
    if not _first(("job", queue, job_class)):
        return
    JOBS_DEFERRED.labels(queue, job_class)
    JOBS_INTERRUPTED.labels(queue, job_class)
    JOBS_CANCELLED.labels(queue, job_class)
    JOBS_COMPLETED.labels(queue, job_class)
    for failure in FAIL_REASONS:
        JOBS_FAILED.labels(queue, job_class, failure)
    for skip in SKIP_REASONS:
        JOBS_SKIPPED.labels(queue, job_class, skip)
    for operation in FENCED_OPERATIONS:
        JOBS_FENCED.labels(queue, job_class, operation)
    for outcome in REAP_OUTCOMES:
        JOBS_REAPED.labels(queue, job_class, outcome)


def prime_jobs(pairs: Iterable[tuple[str, str]]) -> None:
    for queue, job_class in pairs:
        prime_job(queue, job_class)


def prime_schedule(name: str) -> None:
    """Export one schedule's slot counters at 0 (once per process)."""
    if not _first(("schedule", name)):
        return
    for counter in SCHEDULE_SLOT_COUNTERS:
        counter.labels(name)


def prime_pool(name: str) -> None:
    """Export one WorkerPool's rollout counter at 0 (once per process)."""
    if _first(("pool", name)):
        ROLLOUT_REAPED.labels(name)


def prime_pod_runs(kind: str, resource: str | None = None) -> None:
    """Export a kind's pod-run failure causes (and one resource's run count) at 0."""
    if _first(("pod-runs", kind)):
        # Here, not at the top: only pod-run paths prime these, and a thread worker
        # never loads the pod-run structs (docs/benchmarks.md, "Idle worker RSS").
        from jobwarden.structs.podruns import POD_FAILURE_CAUSES

        for cause in POD_FAILURE_CAUSES:
            POD_RUN_FAILURES.labels(kind, cause)
        POD_RUN_START.labels(kind)
    if resource is not None and _first(("pod-run", kind, resource)):
        POD_RUNS.labels(kind, resource)


SCHEDULE_SLOT_COUNTERS = (SCHEDULE_SLOTS_ENQUEUED, SCHEDULE_SLOTS_MISSED, SCHEDULE_SLOTS_SKIPPED)


def forget_resource(kind: str, namespace: str, name: str) -> None:
    """Remove every series of one deleted resource and let it be primed again if it
    comes back (a resource of the same name re-created)."""
    resource = f"{namespace}/{name}"
    RESOURCE_READY.remove(kind, resource)
    POD_RUNS.remove(kind, resource)
    with _primed_lock:
        _primed.discard(("pod-run", kind, resource))
    if kind == "WorkerPool":
        for family in (POOL_DRAIN_TIMEOUT, ROLLOUT_REAPED, ROLLOUT_DURATION):
            family.remove(name)
        with _primed_lock:
            _primed.discard(("pool", name))
    elif kind == "JobSchedule":
        forget_schedule(resource)


def forget_schedule(name: str) -> None:
    """A schedule row is gone: its slot counters go from this process's scrape."""
    for counter in SCHEDULE_SLOT_COUNTERS:
        counter.remove(name)
    with _primed_lock:
        _primed.discard(("schedule", name))

prime_process()
