"""The operator's periodic work: schedule runner, reaper, database-wide gauges, retention.

Each loop runs in its own named thread and, before each pass, holds a database
lease ``operator:<loop>``: of all operators sharing the database (replicas,
other clusters) exactly one runs each loop at a time, and a dead holder is
replaced once its lease lapses (three intervals, at least 10 s). Why a
database lease and not kopf peering: peering is per cluster, and several
clusters share one database.

The lease is an efficiency and a "export once" guarantee, not what makes the
work correct: every loop is safe to run concurrently (a slot's unique key
decides "one job per slot", the reaper's claims are fenced), so a pass that
outlives its lease costs a duplicate query, never a duplicate job. What the
lease does guarantee is that the database-wide gauges are exported by one
process only: the gauge loop's lease is ``jobwarden:gauges``, which workers that
serve /metrics compete for too (:mod:`jobwarden.maintenance.gauges`); a process that does
not hold it removes what it exported, so a ``sum()`` never multiplies queue depth.

A failing pass is logged and counted and the loop goes on: the loops never
throw (a database outage must not stop kopf's reconciliation), and /healthz
reports a loop thread that died.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable

from jobwarden import errors
from jobwarden.controller.runtime import Runtime
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges, reaper, retention
from jobwarden.maintenance.looping import LoopLease, PeriodicTask, TaskLoop, stalled
from jobwarden.schedules import periods, runner

logger = logging.getLogger("jobwarden.controller.periodic")

LEASE_PREFIX = "operator:"


#: The operator's loop lease is the shared holder of :mod:`jobwarden.maintenance.gauges`.


@dataclasses.dataclass
class Loop:
    name: str
    interval: float
    run: Callable[[], object]
    #: Called when this process does not (or no longer) hold the loop's lease.
    standby: Callable[[], None] | None = None
    #: The loop's lease (default ``operator:<name>``).
    lease: str | None = None
    #: After a pass: seconds until the next one is due, if sooner than ``interval``.
    next_in: Callable[[], float | None] | None = None


class Periodic:
    """Runs the loops, each in its own thread under its lease, until :meth:`stop`."""

    def __init__(self, runtime: Runtime, loops: list[Loop]) -> None:
        self.runtime = runtime
        self.loops = loops
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.leases = {
            loop.name: LoopLease(runtime.db, name=loop.lease or f"{LEASE_PREFIX}{loop.name}",
                                 owner=runtime.owner, host=runtime.config.pod_name,
                                 ttl=runtime.config.loop_lease_ttl(loop.interval))
            for loop in loops
        }
        self.tasks = {
            loop.name: PeriodicTask(name=f"loop {loop.name}", interval=loop.interval,
                                    run=loop.run, gate=functools.partial(self._hold, loop.name),
                                    standby=loop.standby, first_delay=0.0,
                                    next_in=loop.next_in)
            for loop in loops
        }

    @property
    def passes(self) -> dict[str, int]:
        """Completed passes per loop (tests and /healthz read it)."""
        return {name: task.passes for name, task in self.tasks.items()}

    def start(self) -> None:
        for loop in self.loops:
            task_loop = TaskLoop([self.tasks[loop.name]], stop=self._stop,
                                    db_state=self.runtime.health.database, report_success=True)
            thread = threading.Thread(target=task_loop.run, daemon=True,
                                      name=f"jobwarden-operator-{loop.name}")
            thread.start()
            self._threads.append(thread)

    def alive(self) -> tuple[bool, str]:
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead and not self._stop.is_set():
            return False, f"periodic thread(s) died: {', '.join(dead)}"
        stuck = stalled([task.progress for task in self.tasks.values()],
                        self.runtime.config.stall_seconds)
        return (False, stuck) if stuck else (True, "ok")

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        for lease in self.leases.values():
            lease.release()

    def _hold(self, name: str) -> bool:
        """A loop's gate: hold its lease (renew or take it); False when it is not ours."""
        lease = self.leases[name]
        try:
            return lease.hold()
        except errors.JobwardenError as exc:
            logger.warning("loop %s: cannot reach the lease table: %s", name, exc)
            self.runtime.health.database(False)
            lease.forget()
            return False


# -- the loops ------------------------------------------------------------------------------


def reap(db: Database) -> int:
    """Reclaim stale claims (counted like a worker's reaper)."""
    return reaper.reap(db)


def run_schedules(db: Database, runtime: Runtime | None = None) -> None:
    """Enqueue due slots (the runner never raises; it counts and logs its errors), then
    wake the pod-run resources whose slots were enqueued, so their pods are claimed and
    created now rather than at their next status refresh."""
    report = runner.enqueue_due(db)
    if report.enqueued or report.errors:
        logger.info("schedule runner: %d enqueued, %d duplicates, %d skipped, %d missed, "
                    "%d errors", report.enqueued, report.duplicates, report.skipped,
                    report.missed, report.errors)
    if runtime is not None and report.pod_runs:
        nudge_pod_runs(runtime, report.pod_runs)


#: Woken this long after the next slot: a pass that comes a hair early (the database's
#: clock against this host's) would find nothing due and come again only after the
#: loop's shortest wait.
SLOT_MARGIN_SECONDS = 0.05


def next_slot_in(db: Database, *, since_pass_began: float) -> float | None:
    """Seconds until the schedule loop's next pass is due for a slot (None: nothing).

    A slot that came due while the last pass ran (``since_pass_began`` seconds ago) is
    due now: the pass's snapshot did not see it. Without that, a slot due a few
    milliseconds after a pass's snapshot waited for the loop's whole check interval."""
    found = db.schedules.seconds_to_next_slot(recent=since_pass_began)
    return None if found is None else found + SLOT_MARGIN_SECONDS


class SchedulePasses:
    """The schedule loop's pass and its wake-up hint, which needs when the pass began."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._began: float | None = None

    def run(self) -> None:
        self._began = time.monotonic()
        run_schedules(self._runtime.db, self._runtime)

    def next_in(self) -> float | None:
        since = 0.0 if self._began is None else time.monotonic() - self._began
        return next_slot_in(self._runtime.db, since_pass_began=since)


def nudge_pod_runs(runtime: Runtime, pod_runs: set[str]) -> None:
    """Wake this operator's reconcile of each resource named ``<Kind>/<ns>/<name>`` it
    caches (a resource of another cluster is that cluster's operator's: its own status
    refresh claims it)."""
    wanted = {tuple(ref.split("/", 2)) for ref in pod_runs}
    for kind in runtime.kinds:
        for body in kind.cache.bodies():
            meta = body.get("metadata") or {}
            if (kind.name, meta.get("namespace"), meta.get("name")) in wanted:
                kind.nudge(str(meta.get("uid")))


def loops(runtime: Runtime) -> tuple[list[Loop], gauges.DatabaseGauges]:
    config = runtime.config
    exported = gauges.DatabaseGauges(runtime.db, period_of=periods.period_seconds)
    kept = retention.RetentionSettings.from_env()
    cleanup = retention.Retention(runtime.db, kept)
    schedules = SchedulePasses(runtime)
    return [
        # Woken at the next slot (one index probe after each pass), not only every
        # interval: a slot's job is enqueued when it is due (bench/cronjob.py).
        Loop(name="schedules", interval=config.schedule_interval, run=schedules.run,
             next_in=schedules.next_in),
        Loop(name="reaper", interval=config.reap_interval, run=lambda: reap(runtime.db)),
        # The gauge lease is shared with workers that serve /metrics (jobwarden.maintenance.gauges).
        Loop(name="gauges", interval=config.gauge_interval, run=exported,
             standby=exported.clear, lease=gauges.LEASE_NAME),
        # Shared with the workers' retention task (extensions.retention): one of them runs it.
        Loop(name="retention", interval=kept.interval if kept.enabled else 0.0,
             run=cleanup.run_pass, lease=retention.LEASE_NAME),
    ], exported
