"""Database-wide gauges, exported once per database by whichever process holds their lease.

Queue depth, oldest pending age, schedule freshness, host counts, the hot
tables' dead tuples and autovacuum state, and the schedule slot fates
(``jobwarden_schedule_slots_total``, counted on the schedule rows) describe the
*database*, not a process: if every worker exported them, a ``sum()`` over pods
would multiply the backlog by the number of pods. So exactly one process per
database exports them: the holder of the lease :data:`LEASE_NAME`. Any process
that serves ``/metrics`` may compete for it -- the operator (one of its loops)
and every ``jobwarden worker`` with an HTTP port (the extension in
:mod:`jobwarden.extensions.gauges`, added by :mod:`jobwarden.assembly`) -- so a
plain worker deployment without the operator can still alert on backlog, and
the gauges survive the death of whichever process exported them (its lease
lapses and another takes it).

A process that does not hold the lease (or lost it) removes the gauges it had
exported, so a scrape never sees two processes' copies for long; a process
that never exported has nothing to remove. A worker that begins to stop
releases the lease at once, so another takes over at its next pass instead of
after the lease's lifetime.

Why a database lease and not kopf peering or a leader election: several
clusters and plain workers share one database, and the lease table already
gives owner-fenced, expiring, token-counted holders (:class:`LoopLease` is the
same holder the operator uses for each of its loops).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobwarden import errors
from jobwarden.maintenance.looping import LoopLease, PeriodicTask
from jobwarden.observability import metrics
from jobwarden.structs.maintenance import DatabaseHealth
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database

__all__ = ["LEASE_NAME", "DatabaseGauges", "GaugeExporter", "lease_ttl"]

logger = logging.getLogger("jobwarden.gauges")

#: The lease whose holder exports the database-wide gauges (operator or worker).
LEASE_NAME = "jobwarden:gauges"


def lease_ttl(interval: float) -> float:
    """How long the gauge lease lives without renewal: three passes, at least 10 s."""
    return max(3 * interval, 10.0)


#: A stored schedule expression's period in seconds, None when unknown (given by the
#: caller: the schedules package sits above this module, jobwarden.schedules.periods).
PeriodOf = Callable[[str], "float | None"]


class DatabaseGauges:
    """Reads the database-wide figures and sets the gauges (the lease holder only).

    ``period_of`` gives each schedule's ``jobwarden_schedule_period_seconds``; without
    it (a caller that cannot compute periods) that gauge is not exported.
    """

    def __init__(self, db: Database, *, period_of: PeriodOf | None = None) -> None:
        self.db = db
        self.period_of = period_of
        self._lock = threading.Lock()
        self._depth: set[tuple[str, ...]] = set()
        self._oldest: set[tuple[str, ...]] = set()
        self._schedules: set[tuple[str, ...]] = set()
        self._hosts: set[tuple[str, ...]] = set()
        self._tables: set[tuple[str, ...]] = set()
        #: True while this process has gauges exported (a standby has nothing to clear).
        self.exporting = False

    def __call__(self) -> None:
        db = self.db
        depth: dict[tuple[str, ...], float] = {
            (s.queue, s.status.value): float(s.count) for s in db.jobs.stats()}
        queues = {labels[0] for labels in depth}
        for queue in queues:  # every status of a known queue, zeros included
            for state in JobStatus:
                depth.setdefault((queue, state.value), 0)
        oldest = db.jobs.oldest_pending()
        hosts: dict[tuple[str, ...], float] = {
            (c.pool, c.state): float(c.count) for c in db.hosts.counts()}
        fates: dict[tuple[str, ...], float] = {
            (name, fate): float(count)
            for name, counts in db.schedules.fate_counts().items()
            for fate, count in counts.items()}
        since: dict[tuple[str, ...], float] = {}
        lag: dict[tuple[str, ...], float] = {}
        suspended: dict[tuple[str, ...], float] = {}
        without: dict[tuple[str, ...], float] = {}
        periods: dict[tuple[str, ...], float] = {}
        for item in db.schedules.health():
            metrics.prime_schedule(item.name)
            since[(item.name,)] = float(item.seconds_since_success)
            lag[(item.name,)] = float(item.lag_seconds)
            suspended[(item.name,)] = 1.0 if item.suspended else 0.0
            without[(item.name,)] = float(item.seconds_without_success)
            period = self.period_of(item.expression) if self.period_of else None
            if period is not None:
                periods[(item.name,)] = period
        health = db.maintenance.health()
        with self._lock:  # read first, then set all at once: a clear() never interleaves
            self._depth = _replace(metrics.QUEUE_DEPTH, self._depth, depth)
            self._oldest = _replace(metrics.QUEUE_OLDEST_PENDING, self._oldest,
                                    {(q,): oldest.get(q, 0.0) for q in queues | set(oldest)})
            self._hosts = _replace(metrics.HOSTS, self._hosts, hosts)
            _replace(metrics.SCHEDULE_SINCE_SUCCESS, self._schedules, since)
            _replace(metrics.SCHEDULE_SUSPENDED, self._schedules, suspended)
            _replace(metrics.SCHEDULE_WITHOUT_SUCCESS, self._schedules, without)
            _replace(metrics.SCHEDULE_PERIOD, self._schedules, periods)
            for (gone,) in self._schedules - set(lag):
                metrics.forget_schedule(gone)  # the slot counters primed for it
            self._schedules = _replace(metrics.SCHEDULE_LAG, self._schedules, lag)
            self._tables = _set_table_health(health, self._tables)
            metrics.SCHEDULE_SLOTS.set_all(fates)
            self.exporting = True

    def clear(self) -> None:
        """Not the holder (any more): export none of the database-wide gauges."""
        with self._lock:
            if not self.exporting:
                return
            for gauge in (metrics.QUEUE_DEPTH, metrics.QUEUE_OLDEST_PENDING,
                          metrics.SCHEDULE_SINCE_SUCCESS, metrics.SCHEDULE_LAG, metrics.HOSTS,
                          metrics.SCHEDULE_SUSPENDED, metrics.SCHEDULE_WITHOUT_SUCCESS,
                          metrics.SCHEDULE_PERIOD,
                          *_TABLE_GAUGES, metrics.DB_TABLE_BYTES):
                gauge.clear()
            metrics.SCHEDULE_SLOTS.clear()
            self._depth, self._oldest, self._schedules, self._hosts = set(), set(), set(), set()
            self._tables = set()
            self.exporting = False


_TABLE_GAUGES = (metrics.DB_DEAD_TUPLES, metrics.DB_LIVE_TUPLES, metrics.DB_AUTOVACUUM_ENABLED,
                 metrics.DB_SECONDS_SINCE_VACUUM)


def _set_table_health(health: DatabaseHealth,
                      previous: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """Dead tuples, autovacuum and size of the hot tables (issue 16; docs/operations.md)."""
    tables: set[tuple[str, ...]] = {(t.table,) for t in health.tables}
    for table in health.tables:
        metrics.DB_DEAD_TUPLES.labels(table.table).set(table.dead)
        metrics.DB_LIVE_TUPLES.labels(table.table).set(table.live)
        metrics.DB_AUTOVACUUM_ENABLED.labels(table.table).set(
            1.0 if health.autovacuum and table.autovacuum_enabled else 0.0)
        if table.seconds_since_vacuum is None:
            with contextlib.suppress(KeyError):
                metrics.DB_SECONDS_SINCE_VACUUM.remove(table.table)
        else:
            metrics.DB_SECONDS_SINCE_VACUUM.labels(table.table).set(table.seconds_since_vacuum)
        metrics.DB_TABLE_BYTES.labels(table.table, "table").set(table.table_bytes)
        metrics.DB_TABLE_BYTES.labels(table.table, "indexes").set(table.index_bytes)
    for (gone,) in previous - tables:
        for gauge in _TABLE_GAUGES:
            with contextlib.suppress(KeyError):
                gauge.remove(gone)
        for kind in ("table", "indexes"):
            with contextlib.suppress(KeyError):
                metrics.DB_TABLE_BYTES.remove(gone, kind)
    return tables


def _replace(gauge: Any, previous: set[tuple[str, ...]],
             values: dict[tuple[str, ...], float]) -> set[tuple[str, ...]]:
    """Set every labelled value and remove the label sets that disappeared."""
    for labels, value in values.items():
        gauge.labels(*labels).set(value)
    for labels in previous - set(values):
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    return set(values)


class GaugeExporter:
    """The gauges under their lease: a periodic task whose gate is the lease.

    ``task`` runs in the caller's :class:`~jobwarden.maintenance.looping.TaskLoop`: each pass
    holds (renews or takes) :data:`LEASE_NAME` and then exports; a pass without the
    lease removes what this process exported. :meth:`stop` releases the lease and
    removes the gauges, so another process takes over at its next pass.
    """

    def __init__(self, db: Database, *, owner: str, host: str, interval: float,
                 ttl: float | None = None, period_of: PeriodOf | None = None) -> None:
        self.gauges = DatabaseGauges(db, period_of=period_of)
        self.lease = LoopLease(db, name=LEASE_NAME, owner=owner, host=host,
                               ttl=ttl if ttl is not None else lease_ttl(interval))
        self._stopped = threading.Event()
        self.task = PeriodicTask(name="gauges", interval=interval, run=self._run,
                                 gate=self._gate, standby=self.gauges.clear)

    def _gate(self) -> bool:
        if self._stopped.is_set():
            return False
        try:
            return self.lease.hold()
        except errors.JobwardenError as exc:
            logger.warning("gauges: cannot reach the lease table: %s", exc)
            self.lease.forget()
            return False

    def _run(self) -> None:
        self.gauges()
        if self._stopped.is_set():  # stop() came during the pass: take nothing back out
            self.gauges.clear()

    def stop(self) -> None:
        self._stopped.set()
        self.task.interval = 0
        self.lease.release()
        self.gauges.clear()
