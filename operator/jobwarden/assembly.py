"""The composition root: the one place that builds a worker with its extensions.

Everything that changes how a worker claims, runs or stops is a
:class:`~jobwarden.worker.extensions.WorkerExtension`, and this module is the
only one that knows them all. ``jobwarden worker``, ``jobwarden tick``,
``jobwarden dev`` (through ``jobwarden worker``), the benchmarks and the tests
all build workers here, so each runs with the same parts in the same order:

1. exclusive jobs (leases): outermost around an attempt, so a busy lease
   answers before anything else runs and the lease is released last;
2. the host registry: drain, per-host cap, self-drain and deregistration;
3. the schedule runner: code-schedule sync and due slots, periodically;
4. the ``/tick`` route, when the worker serves HTTP; its ticks run the same
   schedule pass as the runner of step 3;
5. the gauge exporter, when the worker serves HTTP (``/metrics``) and
   ``gauge_interval`` > 0: it competes for the gauge lease with every other
   worker and the operator, so one process per database exports queue depth;
6. retention of finished jobs (``JOBWARDEN_RETENTION``), periodically, in the
   one process of the database holding its lease (:mod:`jobwarden.maintenance.retention`).

Nothing here is module state: two workers in one process (tests, ``jobwarden
dev`` in-process) each get their own extensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden.observability import tracing
from jobwarden.settings import WorkerSettings
from jobwarden.worker.worker import ExtensionFactory, Worker

# The parts only some workers use are imported where they are added (the tick route
# and the gauge exporter with http_port; tracing where OpenTelemetry is installed;
# the pod-run worker for `run-job`; the host registry, the schedule runner and
# retention, which `run-job` has none of): a worker carries only the modules it runs
# (docs/benchmarks.md, "Idle worker RSS"), and a pod run starts sooner
# (docs/benchmarks.md, "Pod per run against a native CronJob").
if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.podruns.runjob import PodRunWorker
    from jobwarden.schedules.service import ScheduleExtension
    from jobwarden.tick import SchedulePass, Ticker
    from jobwarden.worker.extensions import WorkerExtension
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["build_pod_run_worker", "build_ticker", "build_worker"]


class _Schedules:
    """The schedule extension, built once per worker and shared with its tick route."""

    def __init__(self, override: SchedulePass | None) -> None:
        self.extension: ScheduleExtension | None = None
        self.override = override

    def build(self, worker: WorkerHandle) -> WorkerExtension:
        from jobwarden.schedules.service import ScheduleExtension

        self.extension = ScheduleExtension(worker)
        return self.extension

    def tick_pass(self) -> object:
        if self.override is not None:
            return self.override()
        return self.extension.tick_pass() if self.extension is not None else None


def schedule_period(expression: str) -> float | None:
    """A schedule's period for the gauges, the parser loaded only once there is a schedule
    (a worker without schedules never loads cronsim: docs/benchmarks.md, "Idle worker RSS")."""
    from jobwarden.schedules.periods import period_seconds

    return period_seconds(expression)


def build_worker(db: Database, settings: WorkerSettings, *,
                 extra: Sequence[ExtensionFactory] = (),
                 tick_schedules: SchedulePass | None = None) -> Worker:
    """A worker with every standard extension, then ``extra`` (innermost).

    ``tick_schedules`` replaces the schedule pass a tick runs (tests observe or
    break it without touching the schedules table).
    """
    from jobwarden.extensions.exclusive import ExclusiveJobs
    from jobwarden.extensions.hosts import HostMembership
    from jobwarden.extensions.retention import RetentionExtension

    schedules = _Schedules(tick_schedules)
    factories: list[ExtensionFactory] = [ExclusiveJobs.for_worker, HostMembership,
                                         schedules.build]
    if settings.http_port is not None:
        from jobwarden.extensions.gauges import GaugeExtension
        from jobwarden.tick import TickExtension

        factories.append(lambda worker: TickExtension(worker,
                                                      run_schedules=schedules.tick_pass))
        if settings.gauge_interval > 0:
            factories.append(lambda worker: GaugeExtension(worker, period_of=schedule_period))
    factories.append(RetentionExtension)
    if tracing.enabled():  # outermost: the attempt's span covers lease waits too
        from jobwarden.extensions.tracing import TracingExtension
        factories.insert(0, TracingExtension)
    return Worker(db, settings, extensions=[*factories, *extra])


def build_ticker(db: Database, settings: WorkerSettings) -> Ticker:
    """``jobwarden tick``: a worker that is never started, and a ticker driving it."""
    from jobwarden.extensions.exclusive import ExclusiveJobs
    from jobwarden.extensions.hosts import HostMembership
    from jobwarden.tick import Ticker

    schedules = _Schedules(None)
    worker = Worker(db, settings, extensions=[ExclusiveJobs.for_worker, HostMembership,
                                              schedules.build])
    return Ticker(worker.handle, standalone=True, run_schedules=schedules.tick_pass,
                  on_close=lambda: worker.stop(timeout=0))


def build_pod_run_worker(db: Database, settings: WorkerSettings, *,
                         lease_token: int | None) -> PodRunWorker:
    """``jobwarden run-job``: a worker that is never started, for a pod's one attempt.

    Only the lease extension, adopting the lease the operator took at claim
    (``lease_token``); no host registry (a pod run's pod is not a pool host: no
    cap, no drain), no schedule runner, no routes. Tracing as for any worker.
    """
    from jobwarden.podruns.leasing import PodRunLease
    from jobwarden.podruns.runjob import PodRunWorker

    factories: list[ExtensionFactory] = [PodRunLease.factory(lease_token)]
    if tracing.enabled():
        from jobwarden.extensions.tracing import TracingExtension
        factories.insert(0, TracingExtension)
    return PodRunWorker(db, settings, extensions=factories)
