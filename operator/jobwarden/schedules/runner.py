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
overlap policy:

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
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from jobwarden import errors, metrics
from jobwarden.db import runnerpass
from jobwarden.schedules import expressions, planning, slots
from jobwarden.structs.schedules import (
    SLOT_HISTORY,
    SLOT_PRUNE_MARGIN,
    DueSchedule,
    JobRow,
    PassWrite,
    RunReport,
)

if TYPE_CHECKING:
    from jobwarden.db.database import Connection, Database

__all__ = ["DEFAULT_BATCH", "SLOT_HISTORY", "SLOT_PRUNE_MARGIN", "enqueue_due", "warn_once"]

logger = logging.getLogger("jobwarden.schedules")

#: Schedules planned per transaction: bounds lock time and the size of one insert.
DEFAULT_BATCH = 1000
#: Connections one pass of more than one batch uses at once (_Pages: the next batch
#: is claimed and planned while the previous one is written).
PASS_CONNECTIONS = 2
#: A schedule whose stored expression cannot be read is retried this much later.
ERROR_RETRY_SECONDS = 60
_ACTIVE = ("pending", "processing")


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


def _attempt(db: Database, pages: _Pages,
             page: tuple[tuple[dt.datetime, str] | None, int] | None, *,
             now: dt.datetime | None, tolerance_seconds: int, copy: bool) -> RunReport | None:
    """One try of a batch: the next page (``page`` None) or the same page again (the
    redo after a conflict: its page key and size)."""
    report = RunReport()
    write = PassWrite()
    rows: list[JobRow] = []
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
        report.checked = len(due)
        if at is None:
            return report
        plans: dict[tuple[object, ...], planning.DuePlan] = {}
        for schedule in due:
            try:
                _plan(db, tx.conn, schedule, at, tolerance_seconds, plans, write, rows, report)
            except Exception as exc:  # a bad stored row must not stop the others
                report.errors += 1
                logger.exception("schedule %r: cannot plan", schedule.name)
                _error_advance(write, schedule, at, exc)
        if any(row[12] is None for row in rows):
            rows = _with_ids(tx, rows)
        if copy:
            try:
                tx.copy_jobs(rows)
            except runnerpass.SlotConflict as conflict:
                conflict.page = page
                raise
            fresh_rows = rows
        else:
            fresh = tx.insert_jobs(rows)
            fresh_rows = [row for row in rows if row[7] in fresh]
            if len(fresh_rows) < len(rows):
                report.duplicates += len(rows) - len(fresh_rows)
                write.forget_ids({row[7] for row in rows if row[7] not in fresh})
                position = {name: index for index, name in enumerate(write.names)}
                for row in rows:
                    if row[7] not in fresh:
                        write.enqueued[position[row[9]]] -= 1
        try:
            tx.finish(write, keep=SLOT_HISTORY, merge=not copy,
                      notify_queues=sorted({row[0] for row in fresh_rows}))
        except runnerpass.SlotConflict as conflict:
            conflict.page = page
            raise
    # Committed: only now do the counters move (a rolled-back pass counted nothing).
    report.enqueued += sum(write.enqueued)
    report.skipped += sum(write.skipped)
    report.missed += sum(write.missed)
    for name, enqueued, skipped, missed in zip(write.names, write.enqueued, write.skipped,
                                               write.missed, strict=True):
        metrics.prime_schedule(name)
        if enqueued:
            metrics.SCHEDULE_SLOTS_ENQUEUED.labels(name).inc(enqueued)
        if skipped:
            metrics.SCHEDULE_SLOTS_SKIPPED.labels(name).inc(skipped)
        if missed:
            metrics.SCHEDULE_SLOTS_MISSED.labels(name).inc(missed)
    for (queue, job_class), count in collections.Counter(
            (row[0], row[1]) for row in fresh_rows).items():
        metrics.JOBS_ENQUEUED.labels(queue, job_class).inc(count)
    return report


def _plan(db: Database, conn: Connection, schedule: DueSchedule, at: dt.datetime,
          tolerance_seconds: int, plans: dict[tuple[object, ...], planning.DuePlan],
          write: PassWrite, rows: list[JobRow], report: RunReport) -> None:
    """Plan one schedule: its slots' job rows, its write-back and the fates of its slots,
    appended to ``rows`` and ``write`` only once nothing can fail any more (a schedule
    that fails to plan leaves no half of itself in the pass).

    ``plans``: the pass's plans by their inputs. A plan depends only on the
    expression, the planning point and the catch-up settings (``at`` and the
    tolerance are the pass's), and schedules that share an expression share
    their planning point after the first pass they were due in together (it
    becomes that pass's time), so most of a large pass plans once per
    expression: computing a cron slot in a DST zone costs ~100 us.
    """
    expr = _expression(schedule.expression)
    key = (schedule.expression, schedule.planned_until, schedule.catch_up,
           schedule.catch_up_window_seconds, schedule.catch_up_max)
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = planning.plan_due(
            expr, last_slot=schedule.planned_until, now=at,
            catch_up=cast(planning.CatchUp, schedule.catch_up),  # CHECK-constrained in SQL
            window_seconds=schedule.catch_up_window_seconds,
            max_catch_up=schedule.catch_up_max, tolerance_seconds=tolerance_seconds,
        )
    name = schedule.name
    run: Sequence[dt.datetime] = plan.run  # shared with other schedules: sliced, never changed
    skipped_slots: Sequence[dt.datetime] = ()
    replaced = 0
    if run and schedule.overlap == "Forbid":
        if schedule.last_job_status in _ACTIVE:
            skipped_slots, run = run, ()
        else:
            skipped_slots, run = run[1:], run[:1]
    elif run and schedule.overlap == "Replace":
        skipped_slots, run = run[:-1], run[-1:]
        if schedule.last_job_status in _ACTIVE and schedule.last_job_id is not None:
            status = db.schedules.cancel_job(
                schedule.last_job_id, reason=f"replaced by the slot {run[0].isoformat()}",
                conn=conn)
            replaced = 1 if status is not None else 0
            if replaced:
                db.schedules.mark_replaced(name, job_id=schedule.last_job_id, conn=conn)
            logger.info("schedule %r: previous run %d %s (Replace)", name,
                        schedule.last_job_id,
                        "cancelled" if status == "cancelled" else "asked to stop")
    missed_slots = (_missed_slots(expr, plan.run, after=schedule.planned_until, at=at)
                    if plan.missed else [])
    if skipped_slots:
        logger.info("schedule %r: %d slot(s) skipped by overlap policy %s", name,
                    len(skipped_slots), schedule.overlap)
    if plan.missed:
        logger.info("schedule %r: %d slot(s) missed (catch-up %s)%s", name,
                    plan.missed, schedule.catch_up, "" if plan.missed_exact else " at least")
    # The newest slot that got a fate. The plan considers slots newest first and a
    # slot too old to run makes every older one too old, so when anything runs, the
    # newest slot is among the runs; only an all-missed plan needs a lookup.
    fated: dt.datetime | None
    if plan.run:
        fated = plan.run[-1]
    elif plan.missed:
        newest = expr.prev_at_or_before(at)
        fated = newest if newest is not None and newest > schedule.planned_until else None
    else:
        fated = None
    keys = [slots.slot_key(name, slot) for slot in run]
    # The claim drew one job id per schedule; a second slot's job gets its id after
    # the planning (None until then: _with_ids).
    ids: list[int | None] = [schedule.job_id, *([None] * (len(run) - 1))] if run else []
    new_rows: list[JobRow] = []
    if run:
        queue, priority, max_retries, timeout, idempotent, lease, on_busy = slots.job_fields(
            name=name, queue=schedule.queue, priority=schedule.priority,
            timeout_seconds=schedule.timeout_seconds, max_retries=schedule.max_retries,
            idempotent=schedule.idempotent, overlap=schedule.overlap)
        job_class, data, pod_run = schedule.job_class, schedule.data, schedule.pod_run
        new_rows = [(queue, job_class, data, priority, max_retries, timeout, idempotent,
                     unique_key, lease, name, on_busy, pod_run, job_id)
                    for unique_key, job_id in zip(keys, ids, strict=True)]
    # Nothing below raises: the schedule goes into the pass whole.
    rows.extend(new_rows)
    report.replaced += replaced
    write.names.append(name)
    write.ctids.append(schedule.ctid)
    write.planned_until.append(plan.cursor)
    write.last_slot.append(fated)
    write.last_enqueued_slot.append(run[-1] if run else None)
    write.next_slot.append(plan.next_slot)
    write.enqueued.append(len(run))  # less the duplicates, once the insert has told
    write.skipped.append(len(skipped_slots))
    write.missed.append(plan.missed)
    write.replaced.append(replaced)
    write.last_key.append(keys[-1] if keys else None)
    write.last_job_ids.append(ids[-1] if ids else None)
    write.error.append(None)
    for slot, unique_key, job_id in zip(run, keys, ids, strict=True):
        _fate(write, name, slot, "enqueued", unique_key, job_id)
    for slot in skipped_slots:
        _fate(write, name, slot, "skipped", None, None)
    for slot in missed_slots:
        _fate(write, name, slot, "missed", None, None)
    _count_history(write, schedule,
                   added=len(run) + len(skipped_slots) + len(missed_slots))


def _fate(write: PassWrite, name: str, slot: dt.datetime, fate: str,
          unique_key: str | None, job_id: int | None) -> None:
    write.fate_names.append(name)
    write.fate_slots.append(slot)
    write.fates.append(fate)
    write.fate_keys.append(unique_key)
    write.fate_job_ids.append(job_id)


def _count_history(write: PassWrite, schedule: DueSchedule, *, added: int) -> None:
    """The schedule's history rows after the pass, and whether the pass prunes them.

    The count is an upper bound (a slot that already had a row takes the newer fate
    without a new row): past the bound plus the margin the pass prunes the history
    to the bound, so a prune walks a schedule's history once in SLOT_PRUNE_MARGIN
    passes instead of every pass (readers show the newest SLOT_HISTORY only).
    """
    rows = schedule.slot_rows + added
    if rows > SLOT_HISTORY + SLOT_PRUNE_MARGIN:
        write.prune.append(schedule.name)
        rows = SLOT_HISTORY
    write.slot_rows.append(rows)


def _with_ids(tx: runnerpass.RunnerPass, rows: list[JobRow]) -> list[JobRow]:
    """``rows`` with an id for every job: the second and later slots of a schedule
    (catch-up) draw theirs in one more round trip (the write-back and the history find
    those jobs by their unique keys, as for a duplicate)."""
    missing = sum(1 for row in rows if row[12] is None)
    drawn = iter(tx.job_ids(missing))
    return [row if row[12] is not None else (*row[:12], next(drawn))
            for row in rows]


def _missed_slots(expr: expressions.Expression, run: Sequence[dt.datetime],
                  *, after: dt.datetime, at: dt.datetime) -> list[dt.datetime]:
    """The newest missed slots in ``(after, at]`` (those not in ``run``), at most
    :data:`SLOT_HISTORY`: the history's bound, so a long outage costs no more."""
    planned = set(run)
    found: list[dt.datetime] = []
    for slot in expr.iter_before(at):
        if slot <= after or len(found) >= SLOT_HISTORY:
            break
        if slot not in planned:
            found.append(slot)
    return found


def _error_advance(write: PassWrite, schedule: DueSchedule, at: dt.datetime,
                   exc: Exception) -> None:
    """Leave the planning point alone, record the error, and look again a little later."""
    write.names.append(schedule.name)
    write.ctids.append(schedule.ctid)
    write.planned_until.append(schedule.planned_until)
    write.last_slot.append(None)
    write.last_enqueued_slot.append(None)
    write.next_slot.append(at + dt.timedelta(seconds=ERROR_RETRY_SECONDS))
    write.enqueued.append(0)
    write.skipped.append(0)
    write.missed.append(0)
    write.replaced.append(0)
    write.last_key.append(None)
    write.last_job_ids.append(None)
    write.error.append(f"{type(exc).__name__}: {exc}"[:1000])
    write.slot_rows.append(schedule.slot_rows)
