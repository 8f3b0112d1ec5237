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
import datetime as dt
import functools
import logging
import time
from typing import TYPE_CHECKING, cast

from jobwarden import errors, metrics
from jobwarden.schedules import expressions, planning
from jobwarden.schedules.slots import job_spec
from jobwarden.structs.jobs import JobSpec
from jobwarden.structs.schedules import DueSchedule, RunReport, SlotAdvance, SlotFate

if TYPE_CHECKING:
    from jobwarden.db.database import Connection, Database

__all__ = ["DEFAULT_BATCH", "enqueue_due", "warn_once"]

logger = logging.getLogger("jobwarden.schedules")

#: Schedules planned per transaction: bounds lock time and the size of one insert.
DEFAULT_BATCH = 1000
#: A schedule whose stored expression cannot be read is retried this much later.
ERROR_RETRY_SECONDS = 60
#: Slots kept per schedule in its fate history (``schedule_slots``); older ones are
#: pruned in the pass that adds newer ones. The counts keep every fate.
SLOT_HISTORY = 50
_ACTIVE = ("pending", "processing")


@functools.lru_cache(maxsize=8192)
def _expression(text: str) -> expressions.Expression:
    """Parsed once per distinct stored expression (they are immutable and thread-safe)."""
    return expressions.parse_stored(text)


def enqueue_due(db: Database, *, now: dt.datetime | None = None, limit: int = 1000,
                batch_size: int = DEFAULT_BATCH,
                tolerance_seconds: int = planning.DEFAULT_TOLERANCE_SECONDS) -> RunReport:
    """Enqueue the due slots of up to ``limit`` schedules; never raises.

    ``report.more`` is True when ``limit`` stopped the pass with schedules
    possibly still due (call again). ``tolerance_seconds`` is how late a slot may
    be and still count as current under catch-up ``none`` (at least the caller's
    check period).
    """
    report = RunReport()
    started = time.perf_counter()
    remaining = max(limit, 0)
    after: tuple[dt.datetime, str] | None = None
    try:
        while remaining > 0:
            size = min(batch_size, remaining)
            part, after = _pass(db, now=now, limit=size, tolerance_seconds=tolerance_seconds,
                                after=after)
            report.add(part)
            remaining -= part.checked
            if part.checked < size:
                break
        else:
            report.more = limit > 0
    except errors.SchemaMissing as exc:
        report.errors += 1
        warn_once(f"schedules are off until the schema is migrated: {exc}")
    except errors.DatabaseUnavailable as exc:
        report.errors += 1
        logger.warning("schedule runner: %s", exc)
    except Exception:
        report.errors += 1
        logger.exception("schedule runner pass failed")
    report.seconds = time.perf_counter() - started
    metrics.SCHEDULE_RUNS.labels("error" if report.errors else "ok").inc()
    return report


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log ``message`` once per process (a missing schema would repeat every pass)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("%s", message)


def _pass(db: Database, *, now: dt.datetime | None, limit: int, tolerance_seconds: int,
          after: tuple[dt.datetime, str] | None,
          ) -> tuple[RunReport, tuple[dt.datetime, str] | None]:
    """One transaction: claim due schedules, plan, enqueue, advance; metrics after commit.

    Returns the report and the page key to continue after.
    """
    report = RunReport()
    per_schedule: list[tuple[str, int, int, int]] = []  # name, enqueued, skipped, missed
    enqueued_specs: list[JobSpec] = []
    with db.transaction() as conn:
        at = db.schedules.now(conn=conn, now=now)
        due = db.schedules.claim_due(now=at, limit=limit, conn=conn, after=after)
        report.checked = len(due)
        if not due:
            return report, after
        after = (due[-1].next_slot, due[-1].name)
        advances: list[SlotAdvance] = []
        plans: dict[tuple[object, ...], planning.DuePlan] = {}
        batch: list[JobSpec] = []
        owners: list[tuple[int, int]] = []  # (index into advances, slot index) per spec
        slots_of: list[list[dt.datetime]] = []
        fates: list[SlotFate] = []
        for schedule in due:
            try:
                run, advance, replaced, decided = _plan(db, schedule, at, tolerance_seconds,
                                                        conn, plans)
            except Exception as exc:  # a bad stored row must not stop the others
                report.errors += 1
                logger.exception("schedule %r: cannot plan", schedule.name)
                advances.append(_error_advance(schedule, at, exc))
                slots_of.append([])
                continue
            report.replaced += replaced
            fates.extend(decided)
            index = len(advances)
            advances.append(advance)
            slots_of.append(run)
            for position, slot in enumerate(run):
                batch.append(job_spec(
                    name=schedule.name, slot=slot, job_class=schedule.job_class,
                    data=schedule.data, queue=schedule.queue, priority=schedule.priority,
                    timeout_seconds=schedule.timeout_seconds, max_retries=schedule.max_retries,
                    idempotent=schedule.idempotent, overlap=schedule.overlap,
                    pod_run=schedule.pod_run))
                owners.append((index, position))
        results = db.jobs.insert_many(batch, conn=conn)
        fresh = [0] * len(advances)
        last_ids: list[int | None] = [None] * len(advances)
        for spec, (index, position), result in zip(batch, owners, results, strict=True):
            last_ids[index] = result.id  # slots are ascending: the newest slot's job wins
            fates.append(SlotFate(schedule=advances[index].name,
                                  slot=slots_of[index][position], fate="enqueued",
                                  job_id=result.id))
            if result.duplicate:
                report.duplicates += 1
            else:
                fresh[index] += 1
                enqueued_specs.append(spec)
        final: list[SlotAdvance] = []
        for index, advance in enumerate(advances):
            run = slots_of[index]
            final.append(SlotAdvance(
                name=advance.name, planned_until=advance.planned_until,
                last_slot=advance.last_slot,
                last_enqueued_slot=run[-1] if run else None, next_slot=advance.next_slot,
                enqueued=fresh[index], skipped=advance.skipped, missed=advance.missed,
                last_job_id=last_ids[index], error=advance.error, replaced=advance.replaced))
            report.enqueued += fresh[index]
            report.skipped += advance.skipped
            report.missed += advance.missed
            per_schedule.append((advance.name, fresh[index], advance.skipped, advance.missed))
        db.schedules.advance_many(final, conn=conn)
        db.schedules.record_slots(fates, keep=SLOT_HISTORY, conn=conn)
    # Committed: only now do the counters move (a rolled-back pass counted nothing).
    for name, enqueued, skipped, missed in per_schedule:
        metrics.prime_schedule(name)
        if enqueued:
            metrics.SCHEDULE_SLOTS_ENQUEUED.labels(name).inc(enqueued)
        if skipped:
            metrics.SCHEDULE_SLOTS_SKIPPED.labels(name).inc(skipped)
        if missed:
            metrics.SCHEDULE_SLOTS_MISSED.labels(name).inc(missed)
    for (queue, job_class), count in collections.Counter(
            (spec.queue, spec.job_class) for spec in enqueued_specs).items():
        metrics.JOBS_ENQUEUED.labels(queue, job_class).inc(count)
    return report, after


def _plan(db: Database, schedule: DueSchedule, at: dt.datetime, tolerance_seconds: int,
          conn: Connection, plans: dict[tuple[object, ...], planning.DuePlan],
          ) -> tuple[list[dt.datetime], SlotAdvance, int, list[SlotFate]]:
    """The slots to enqueue for one schedule, its write-back, runs replaced (0 or 1),
    and the fates of the slots it did not enqueue (skipped, missed; for the history).

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
    run = list(plan.run)
    skipped = replaced = 0
    skipped_slots: list[dt.datetime] = []
    previous_active = schedule.last_job_status in _ACTIVE
    if run and schedule.overlap == "Forbid":
        if previous_active:
            skipped_slots, run = run, []
        else:
            skipped_slots, run = run[1:], run[:1]
    elif run and schedule.overlap == "Replace":
        skipped_slots, run = run[:-1], run[-1:]
        if previous_active and schedule.last_job_id is not None:
            status = db.schedules.cancel_job(
                schedule.last_job_id, reason=f"replaced by the slot {run[0].isoformat()}",
                conn=conn)
            replaced = 1 if status is not None else 0
            if replaced:
                db.schedules.mark_replaced(schedule.name, job_id=schedule.last_job_id,
                                           conn=conn)
            logger.info("schedule %r: previous run %d %s (Replace)", schedule.name,
                        schedule.last_job_id,
                        "cancelled" if status == "cancelled" else "asked to stop")
    skipped = len(skipped_slots)
    decided = [SlotFate(schedule=schedule.name, slot=s, fate="skipped") for s in skipped_slots]
    if plan.missed:
        decided.extend(SlotFate(schedule=schedule.name, slot=s, fate="missed")
                       for s in _missed_slots(expr, plan.run, after=schedule.planned_until,
                                              at=at))
    if skipped:
        logger.info("schedule %r: %d slot(s) skipped by overlap policy %s", schedule.name,
                    skipped, schedule.overlap)
    if plan.missed:
        logger.info("schedule %r: %d slot(s) missed (catch-up %s)%s", schedule.name,
                    plan.missed, schedule.catch_up, "" if plan.missed_exact else " at least")
    # The newest slot that got a fate. The plan considers slots newest first and a
    # slot too old to run makes every older one too old, so when anything runs, the
    # newest slot is among the runs; only an all-missed plan needs a lookup.
    if plan.run:
        fated: dt.datetime | None = plan.run[-1]
    elif plan.missed:
        newest = expr.prev_at_or_before(at)
        fated = newest if newest is not None and newest > schedule.planned_until else None
    else:
        fated = None
    return run, SlotAdvance(
        name=schedule.name, planned_until=plan.cursor, last_slot=fated,
        last_enqueued_slot=None, next_slot=plan.next_slot, enqueued=0, skipped=skipped,
        missed=plan.missed, last_job_id=None, replaced=replaced,
    ), replaced, decided


def _missed_slots(expr: expressions.Expression, run: tuple[dt.datetime, ...] | list[dt.datetime],
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


def _error_advance(schedule: DueSchedule, at: dt.datetime, exc: Exception) -> SlotAdvance:
    """Leave the planning point alone, record the error, and look again a little later."""
    return SlotAdvance(
        name=schedule.name, planned_until=schedule.planned_until, last_slot=None,
        last_enqueued_slot=None, next_slot=at + dt.timedelta(seconds=ERROR_RETRY_SECONDS),
        enqueued=0, skipped=0, missed=0, last_job_id=None,
        error=f"{type(exc).__name__}: {exc}"[:1000],
    )
