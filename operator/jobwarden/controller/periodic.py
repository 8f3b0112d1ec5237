"""The operator's periodic work: schedule runner, reaper, database-wide gauges.

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
process only: an operator that does not hold ``operator:gauges`` removes them,
so a ``sum()`` over operators never multiplies queue depth.

A failing pass is logged and counted and the loop goes on: the loops never
throw (a database outage must not stop kopf's reconciliation), and /healthz
reports a loop thread that died.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from jobwarden import errors, leases, metrics, reaper
from jobwarden.controller.runtime import Runtime
from jobwarden.db.database import Database
from jobwarden.looping import PeriodicTask, TaskLoop
from jobwarden.schedules import runner
from jobwarden.structs.states import JobStatus

logger = logging.getLogger("jobwarden.controller.periodic")

LEASE_PREFIX = "operator:"


class LoopLease:
    """The database lease this process tries to hold for one loop (the shared holder)."""

    def __init__(self, db: Database, *, name: str, owner: str, host: str, ttl: float) -> None:
        self._db = db
        self.name = name
        self._owner = owner
        self._host = host
        self._ttl = ttl
        self._holder: leases.LeaseHolder | None = None

    @property
    def token(self) -> int | None:
        return self._holder.token if self._holder is not None else None

    @property
    def held(self) -> bool:
        return self._holder is not None

    def hold(self) -> bool:
        """Renew the lease if held, else try to take it; True when this process holds it."""
        if self._holder is not None:
            if self._holder.extend():
                return True
            logger.warning("lost lease %s (token %d): another operator took over", self.name,
                           self._holder.token)
            self._holder = None
        sent = time.monotonic()
        found = self._db.leases.try_acquire(name=self.name, owner=self._owner,
                                            ttl_seconds=self._ttl, host=self._host)
        if found.acquired:
            self._holder = leases.LeaseHolder(self._db, found, owner=self._owner,
                                              ttl=self._ttl, kind="lock", requested_at=sent,
                                              counted=False)
            logger.info("holding lease %s (token %s): this operator runs the loop", self.name,
                        found.token)
            return True
        return False

    def forget(self) -> None:
        """The lease table is out of reach: stop counting on the lease (it may lapse)."""
        self._holder = None

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        try:
            holder.release(retry_seconds=0)
        except errors.JobwardenError as exc:
            logger.warning("could not release lease %s (it will lapse): %s", self.name, exc)


@dataclasses.dataclass
class Loop:
    name: str
    interval: float
    run: Callable[[], object]
    #: Called when this process does not (or no longer) hold the loop's lease.
    standby: Callable[[], None] | None = None


class Periodic:
    """Runs the loops, each in its own thread under its lease, until :meth:`stop`."""

    def __init__(self, runtime: Runtime, loops: list[Loop]) -> None:
        self.runtime = runtime
        self.loops = loops
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.leases = {
            loop.name: LoopLease(runtime.db, name=f"{LEASE_PREFIX}{loop.name}",
                                 owner=runtime.owner, host=runtime.config.pod_name,
                                 ttl=runtime.config.loop_lease_ttl(loop.interval))
            for loop in loops
        }
        self.tasks = {
            loop.name: PeriodicTask(name=f"loop {loop.name}", interval=loop.interval,
                                    run=loop.run, gate=functools.partial(self._hold, loop.name),
                                    standby=loop.standby, first_delay=0.0)
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
        return True, "ok"

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


def run_schedules(db: Database) -> None:
    """Enqueue due slots (the runner never raises; it counts and logs its errors)."""
    report = runner.enqueue_due(db)
    if report.enqueued or report.errors:
        logger.info("schedule runner: %d enqueued, %d duplicates, %d skipped, %d missed, "
                    "%d errors", report.enqueued, report.duplicates, report.skipped,
                    report.missed, report.errors)


class Gauges:
    """The database-wide gauges, set by the holder of ``operator:gauges`` only."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._depth: set[tuple[str, str]] = set()
        self._oldest: set[str] = set()
        self._schedules: set[str] = set()
        self._hosts: set[tuple[str, str]] = set()

    def __call__(self) -> None:
        db = self.runtime.db
        depth = {(s.queue, s.status.value): float(s.count) for s in db.jobs.stats()}
        queues = {queue for queue, _ in depth}
        for queue in queues:  # every status of a known queue, zeros included
            for state in JobStatus:
                depth.setdefault((queue, state.value), 0)
        self._depth = _replace(metrics.QUEUE_DEPTH, self._depth, depth)
        oldest = db.jobs.oldest_pending()
        self._oldest = _replace(metrics.QUEUE_OLDEST_PENDING, self._oldest,
                                {(q,): oldest.get(q, 0.0) for q in queues | set(oldest)})
        hosts = {(c.pool, c.state): float(c.count) for c in db.hosts.counts()}
        self._hosts = _replace(metrics.HOSTS, self._hosts, hosts)
        since: dict[tuple[str, ...], float] = {}
        lag: dict[tuple[str, ...], float] = {}
        for item in self.runtime.client.schedules.health():
            metrics.prime_schedule(item.name)
            since[(item.name,)] = float(item.seconds_since_success)
            lag[(item.name,)] = float(item.lag_seconds)
        _replace(metrics.SCHEDULE_SINCE_SUCCESS, self._schedules, since)
        self._schedules = _replace(metrics.SCHEDULE_LAG, self._schedules, lag)

    def clear(self) -> None:
        """Not the holder (any more): export none of the database-wide gauges."""
        for gauge in (metrics.QUEUE_DEPTH, metrics.QUEUE_OLDEST_PENDING,
                      metrics.SCHEDULE_SINCE_SUCCESS, metrics.SCHEDULE_LAG, metrics.HOSTS):
            gauge.clear()
        self._depth, self._oldest, self._schedules, self._hosts = set(), set(), set(), set()


def _replace(gauge: Any, previous: set[Any], values: dict[Any, float]) -> set[Any]:
    """Set every labelled value and remove the label sets that disappeared."""
    for labels, value in values.items():
        gauge.labels(*labels).set(value)
    for labels in previous - set(values):
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    return set(values)


def loops(runtime: Runtime) -> tuple[list[Loop], Gauges]:
    config = runtime.config
    gauges = Gauges(runtime)
    return [
        Loop(name="schedules", interval=config.schedule_interval,
             run=lambda: run_schedules(runtime.db)),
        Loop(name="reaper", interval=config.reap_interval, run=lambda: reap(runtime.db)),
        Loop(name="gauges", interval=config.gauge_interval, run=gauges, standby=gauges.clear),
    ], gauges
