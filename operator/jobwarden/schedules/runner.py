"""The schedule runner: turn due slots into jobs, one job per slot, from any process.

No leader: every worker, the operator and any number of clusters may run
:func:`enqueue_due` at the same time. Two things make that safe:

1. **The row lock splits the work.** A pass claims due schedules with
   ``SELECT ... FOR UPDATE SKIP LOCKED`` inside one transaction, enqueues their
   slots (``db.jobs.insert_many(..., conn=conn)``) and advances each row's
   planning point in the *same* transaction. A concurrent runner skips the
   locked rows, and once the transaction commits the rows are no longer due.
   A crash before the commit rolls back the jobs and the advance together.
2. **The slot's unique key decides.** Each job carries
   ``<name>:<slot UTC ISO 8601>`` in ``jobs.unique_key``; even a runner working
   from a stale view cannot insert a second job for a slot. Such an attempt is
   reported as a *duplicate*, not an error.

Every slot in ``(planned_until, now]`` gets exactly one recorded fate, decided
by :func:`jobwarden.schedules.planning.plan_due` (catch-up) and then by the
overlap policy (:func:`jobwarden.schedules.decisions.decide`: the pure decision
this module carries out):

* ``Allow``: every slot the plan runs is enqueued.
* ``Forbid``: while the previous run (the job of the newest enqueued slot) is
  pending or processing, slots are **skipped** and counted. Within one pass the
  rule applies slot by slot, so after an outage with catch-up ``all`` only the
  oldest runnable slot is enqueued and the later ones are skipped.
* ``Replace``: the previous run is cancelled if pending, or asked to stop if
  processing (its next ``heartbeat()`` raises ``JobCancelled``); within one
  pass only the newest runnable slot is enqueued, the older ones are skipped
  (replaced before they could start).

Forbid and Replace runs carry the lease ``schedule:<name>`` on the job row, so
even a run that was not skipped (a backfill, a run still stopping after a
Replace) does not overlap another: the worker takes the lease named on the row.

Time is the database clock (``now()`` at the start of the pass's transaction)
unless ``now`` is passed, which is how tests simulate outages without sleeping.
The runner never raises: errors are logged and counted in the report.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.db import runnerpass
from jobwarden.observability import metrics
from jobwarden.schedules import decisions, expressions, planning
from jobwarden.structs.schedules import (
    SLOT_HISTORY,
    SLOT_PRUNE_MARGIN,
    Advance,
    DueSchedule,
    JobRow,
    PassWrite,
    RunReport,
)

if TYPE_CHECKING:
    from jobwarden.db.database import Database

__all__ = ["DEFAULT_BATCH", "SLOT_HISTORY", "SLOT_PRUNE_MARGIN", "enqueue_due", "warn_once"]

logger = logging.getLogger("jobwarden.schedules")

#: Schedules planned per transaction: bounds lock time and the size of one insert.
DEFAULT_BATCH = 1000
#: Connections one pass of more than one batch uses at once (_Pages: the next batch
#: is claimed and planned while the previous one is written).
PASS_CONNECTIONS = 2
#: A schedule whose stored expression cannot be read is retried this much later.
ERROR_RETRY_SECONDS = 60


@functools.lru_cache(maxsize=8192)
def _expression(text: str) -> expressions.Expression:
    """Parsed once per distinct stored expression (they are immutable and thread-safe)."""
    return expressions.parse_stored(text)


def enqueue_due(db: Database, *, now: dt.datetime | None = None, limit: int = 1000,
                batch_size: int = DEFAULT_BATCH,
                tolerance_seconds: int = planning.DEFAULT_TOLERANCE_SECONDS,
                connections: int = PASS_CONNECTIONS) -> RunReport:
    """Enqueue the due slots of up to ``limit`` schedules; never raises.

    ``report.more`` is True when ``limit`` stopped the pass with schedules
    possibly still due (call again). ``tolerance_seconds`` is how late a slot may
    be and still count as current under catch-up ``none`` (at least the caller's
    check period). A pass of more than one batch runs its batches on up to
    ``connections`` connections at once (see :class:`_Pages`).
    """
    report = RunReport()
    started = time.perf_counter()
    pages = _Pages(limit=max(limit, 0), size=batch_size)
    try:
        lanes = min(max(connections, 1), -(-pages.limit // max(batch_size, 1)))
        if lanes > 1:
            with concurrent.futures.ThreadPoolExecutor(
                    lanes, thread_name_prefix="jobwarden-schedule-pass") as pool:
                for lane in [pool.submit(_lane, db, pages, report, now=now,
                                         tolerance_seconds=tolerance_seconds)
                             for _ in range(lanes)]:
                    lane.result()  # the first lane's error, once every lane has stopped
        else:
            _lane(db, pages, report, now=now, tolerance_seconds=tolerance_seconds)
    except errors.SchemaMissing as exc:
        report.errors += 1
        warn_once(f"schedules are off until the schema is migrated: {exc}")
    except errors.DatabaseUnavailable as exc:
        report.errors += 1
        logger.warning("schedule runner: %s", exc)
    except Exception:
        report.errors += 1
        logger.exception("schedule runner pass failed")
    report.more = pages.more
    report.seconds = time.perf_counter() - started
    metrics.SCHEDULE_RUNS.labels("error" if report.errors else "ok").inc()
    return report


class _Pages:
    """The batches of one pass, handed out in due order to the lanes that run them.

    A batch is a transaction of its own (claim, COPY, write-back); the next batch's
    claim needs only the page key of the previous claim, so a second lane can claim
    and plan the next batch while the first one's COPY and write-back run on the
    server: the client's planning and two server processes overlap instead of
    taking turns. Correctness does not depend on the lanes (each batch locks its
    rows as any runner does, and the unique key decides); the claims take turns
    under :attr:`lock` so the pages are consecutive and none is claimed twice. A
    lane takes its connection before the turn and never waits for one while
    holding it, so lanes sharing a small pool cannot deadlock.
    """

    def __init__(self, *, limit: int, size: int) -> None:
        self.limit = limit
        self.size = size
        self.lock = threading.Lock()
        self.counting = threading.Lock()
        self.remaining = limit
        self.after: tuple[dt.datetime, str] | None = None
        self.done = False

    @property
    def more(self) -> bool:
        """True when the limit stopped the pass with schedules possibly still due."""
        return not self.done and self.remaining <= 0 and self.limit > 0

    def claimed(self, due: Sequence[DueSchedule], size: int) -> None:
        """A claim of ``size`` found ``due`` (called holding :attr:`lock`)."""
        self.remaining -= len(due)
        if due:
            self.after = (due[-1].next_slot, due[-1].name)
        if len(due) < size:
            self.done = True


def _lane(db: Database, pages: _Pages, report: RunReport, *, now: dt.datetime | None,
          tolerance_seconds: int) -> None:
    """Run batches until the pass is done, adding what each committed to ``report``
    (so a batch that failed leaves the counts of the committed ones standing)."""
    try:
        while not pages.done and pages.remaining > 0:
            part = _pass(db, pages, now=now, tolerance_seconds=tolerance_seconds)
            if part is None:
                break
            with pages.counting:
                report.add(part)
    except BaseException:
        pages.done = True  # the other lanes stop after their batch
        raise


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log ``message`` once per process (a missing schema would repeat every pass)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("%s", message)


def _pass(db: Database, pages: _Pages, *, now: dt.datetime | None,
          tolerance_seconds: int) -> RunReport | None:
    """One transaction: claim the next page of due schedules, plan, enqueue, advance;
    metrics after commit. None: no page was left to claim.

     The jobs go in by COPY
    and the history by a plain insert; a slot whose job already exists (a backfill,
    a runner that worked from a stale view) fails the COPY, a slot that has a
    history row (a planning point moved back) fails the insert, and the pass is
    redone with inserts that skip the job and update the history row.
    """
    page: tuple[tuple[dt.datetime, str] | None, int] | None = None
    try:
        return _attempt(db, pages, page, now=now, tolerance_seconds=tolerance_seconds,
                        copy=True)
    except runnerpass.SlotConflict as conflict:
        logger.debug("schedule runner: a slot's job or history row exists; redoing the "
                     "batch without COPY")
        return _attempt(db, pages, conflict.page, now=now,
                        tolerance_seconds=tolerance_seconds, copy=False)


@dataclasses.dataclass
class _Batch:
    """One batch in the making: the claimed page's clock and what its schedules add."""

    db: Database
    tx: runnerpass.RunnerPass
    at: dt.datetime
    tolerance_seconds: int
    report: RunReport = dataclasses.field(default_factory=RunReport)
    write: PassWrite = dataclasses.field(default_factory=PassWrite)
    rows: list[JobRow] = dataclasses.field(default_factory=list)
    #: The batch's catch-up plans by their inputs (see :func:`_due_plan`).
    plans: dict[tuple[object, ...], planning.DuePlan] = dataclasses.field(default_factory=dict)


def _attempt(db: Database, pages: _Pages,
             page: tuple[tuple[dt.datetime, str] | None, int] | None, *,
             now: dt.datetime | None, tolerance_seconds: int, copy: bool) -> RunReport | None:
    """One try of a batch: the next page (``page`` None) or the same page again (the
    redo after a conflict: its page key and size)."""
    with runnerpass.runner_pass(db) as tx:
        if page is None:
            with pages.lock:
                if pages.done or pages.remaining <= 0:
                    return None
                page = (pages.after, min(pages.size, pages.remaining))
                at, due = tx.claim(now=now, limit=page[1], after=page[0])
                pages.claimed(due, page[1])
        else:
            at, due = tx.claim(now=now, limit=page[1], after=page[0])
        if at is None:
            return RunReport(checked=len(due))
        batch = _Batch(db, tx, at, tolerance_seconds, report=RunReport(checked=len(due)))
        for schedule in due:
            _plan(batch, schedule)
        try:
            fresh_rows = _write(batch, copy=copy)
        except runnerpass.SlotConflict as conflict:
            conflict.page = page
            raise
    _count(batch.write, batch.report, fresh_rows)
    return batch.report


def _write(batch: _Batch, *, copy: bool) -> list[JobRow]:
    """Insert the batch's jobs, write its schedules back and COMMIT; the jobs inserted.

    By COPY, or (``copy`` False: the redo) by an insert that skips a slot whose job
    exists: such a slot is a duplicate, not counted enqueued.
    """
    tx, write, report = batch.tx, batch.write, batch.report
    rows = batch.rows
    if any(row.id is None for row in rows):
        rows = _with_ids(tx, rows)
    if copy:
        tx.copy_jobs(rows)
        fresh_rows = rows
    else:
        fresh = tx.insert_jobs(rows)
        fresh_rows = [row for row in rows if row.unique_key in fresh]
        report.duplicates += write.less_existing(rows, fresh)
    tx.finish(write, keep=SLOT_HISTORY, merge=not copy,
              notify_queues=sorted({row.queue for row in fresh_rows}))
    return fresh_rows


def _count(write: PassWrite, report: RunReport, fresh_rows: Sequence[JobRow]) -> None:
    """Committed: only now do the counters move (a rolled-back pass counted nothing)."""
    for name in write.hold_names:
        logger.warning("schedule %r held (not enqueued): the operator of the cluster that "
                       "wrote it has not confirmed it within its grace (its JobSchedule may "
                       "be gone); an operator whose JobSchedule exists resumes it", name)
    a = write.advances
    report.enqueued += sum(a.enqueued)
    report.skipped += sum(a.skipped)
    report.missed += sum(a.missed)
    for name, enqueued, skipped, missed in zip(a.name, a.enqueued, a.skipped, a.missed,
                                               strict=True):
        metrics.prime_schedule(name)
        if enqueued:
            metrics.SCHEDULE_SLOTS_ENQUEUED.labels(name).inc(enqueued)
        if skipped:
            metrics.SCHEDULE_SLOTS_SKIPPED.labels(name).inc(skipped)
        if missed:
            metrics.SCHEDULE_SLOTS_MISSED.labels(name).inc(missed)
    report.pod_runs.update(row.pod_run for row in fresh_rows if row.pod_run)
    for (queue, job_class), count in collections.Counter(
            (row.queue, row.job_class) for row in fresh_rows).items():
        metrics.JOBS_ENQUEUED.labels(queue, job_class).inc(count)


def _plan(batch: _Batch, schedule: DueSchedule) -> None:
    """Add one schedule to the batch: decided (pure), its previous run cancelled if the
    decision says so (the one effect), then its rows and write-back, whole.

    A schedule whose owner is absent is held instead; one that fails to plan (a bad
    stored row must not stop the others) is counted as an error, leaves no half of
    itself in the batch, and is looked at again a little later.
    """
    if schedule.owner_absent:
        # Its cluster's operator has not confirmed it within the grace: its
        # resource may be gone (docs/schedules.md, "Rows whose owner is gone").
        batch.write.hold_names.append(schedule.name)
        batch.write.hold_ctids.append(schedule.ctid)
        return
    try:
        expr = _expression(schedule.expression)
        decision = decisions.decide(schedule, _due_plan(batch, schedule, expr), expr,
                                    at=batch.at)
        replaced = 0 if decision.replace_job is None else _replace_previous(batch, decision)
    except Exception as exc:
        batch.report.errors += 1
        logger.exception("schedule %r: cannot plan", schedule.name)
        batch.write.advances.append(_error_advance(schedule, batch.at, exc))
        return
    if decision.skipped or decision.missed:
        _log_fates(schedule, decision)
    batch.rows.extend(decision.jobs)
    batch.report.replaced += replaced
    decision.write_into(batch.write, replaced=replaced)


def _due_plan(batch: _Batch, schedule: DueSchedule,
              expr: expressions.Expression) -> planning.DuePlan:
    """The schedule's catch-up plan, computed once per distinct input in the batch.

    A plan depends only on the expression, the planning point and the catch-up
    settings (``at`` and the tolerance are the pass's), and schedules that share an
    expression share their planning point after the first pass they were due in
    together (it becomes that pass's time), so most of a large pass plans once per
    expression: computing a cron slot in a DST zone costs ~100 us.
    """
    key = (schedule.expression, schedule.planned_until, schedule.catch_up,
           schedule.catch_up_window_seconds, schedule.catch_up_max)
    plan = batch.plans.get(key)
    if plan is None:
        plan = batch.plans[key] = planning.plan_due(
            expr, last_slot=schedule.planned_until, now=batch.at,
            catch_up=schedule.catch_up, window_seconds=schedule.catch_up_window_seconds,
            catch_up_max=schedule.catch_up_max, tolerance_seconds=batch.tolerance_seconds)
    return plan


def _replace_previous(batch: _Batch, decision: decisions.ScheduleDecision) -> int:
    """Cancel (pending) or ask to stop (processing) the run the decision replaces, in
    the batch's transaction; 1 if there was one to replace, else 0."""
    job_id = decision.replace_job
    assert job_id is not None
    db, conn = batch.db, batch.tx.conn
    status = db.schedules.cancel_job(
        job_id, reason=f"replaced by the slot {decision.run[0].isoformat()}", conn=conn)
    if status is not None:
        db.schedules.mark_replaced(decision.name, job_id=job_id, conn=conn)
    logger.info("schedule %r: previous run %d %s (Replace)", decision.name, job_id,
                "cancelled" if status == "cancelled" else "asked to stop")
    return 1 if status is not None else 0


def _log_fates(schedule: DueSchedule, decision: decisions.ScheduleDecision) -> None:
    if decision.skipped:
        logger.info("schedule %r: %d slot(s) skipped by overlap policy %s", schedule.name,
                    len(decision.skipped), schedule.overlap)
    if decision.missed:
        logger.info("schedule %r: %d slot(s) missed (catch-up %s)%s", schedule.name,
                    decision.missed, schedule.catch_up,
                    "" if decision.missed_exact else " at least")


def _with_ids(tx: runnerpass.RunnerPass, rows: list[JobRow]) -> list[JobRow]:
    """``rows`` with an id for every job: the second and later slots of a schedule
    (catch-up) draw theirs in one more round trip (the write-back and the history find
    those jobs by their unique keys, as for a duplicate)."""
    missing = sum(1 for row in rows if row.id is None)
    drawn = iter(tx.job_ids(missing))
    return [row if row.id is not None else row._replace(id=next(drawn)) for row in rows]


def _error_advance(schedule: DueSchedule, at: dt.datetime, exc: Exception) -> Advance:
    """Leave the planning point alone, record the error, and look again a little later."""
    return Advance(
        name=schedule.name, ctid=schedule.ctid, planned_until=schedule.planned_until,
        last_slot=None, last_enqueued_slot=None,
        next_slot=at + dt.timedelta(seconds=ERROR_RETRY_SECONDS),
        enqueued=0, skipped=0, missed=0, replaced=0, last_key=None, last_job_id=None,
        error=f"{type(exc).__name__}: {exc}"[:1000], slot_rows=schedule.slot_rows)
