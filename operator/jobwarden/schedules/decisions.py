"""What a runner pass decides for one due schedule: pure, no database.

The runner (:mod:`jobwarden.schedules.runner`) claims due schedules, asks
:func:`jobwarden.schedules.planning.plan_due` which slots the catch-up rule runs
and how many it missed, and then :func:`decide` here: which of those slots the
overlap policy runs or skips, the job row of each slot that runs (its unique
key, lease and ``on_busy``), the fate of every slot for the history, and the
schedule's write-back (:meth:`ScheduleDecision.write_into` adds the last two to
the pass's columns). The only effect the decision asks for is the cancellation
of the previous run (``Replace``): :attr:`ScheduleDecision.replace_job`, which
the runner performs and counts before it writes the decision.

Keeping this free of I/O is what lets the overlap rules, the slot keys and the
``on_busy`` of every policy be tested as a table of cases (tests/unit), while
the database tests prove the runner carries the decisions out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

from jobwarden.schedules import expressions, planning, slots
from jobwarden.structs.policies import Overlap
from jobwarden.structs.schedules import (
    SLOT_HISTORY,
    SLOT_PRUNE_MARGIN,
    Advance,
    DueSchedule,
    FateColumns,
    FateRow,
    JobRow,
    PassWrite,
)

__all__ = ["ScheduleDecision", "by_overlap", "decide", "history_rows", "missed_slots"]

#: Job statuses in which the previous run still counts as running for the overlap policy.
_ACTIVE = ("pending", "processing")
#: Builds a named tuple from a tuple of its fields in order, in C (see :func:`slot_jobs`).
_new = tuple.__new__


class ScheduleDecision(NamedTuple):
    """One due schedule's part of a pass: every slot in ``(planned_until, at]`` with a fate.

    ``run`` are the slots enqueued (ascending; one job each in ``jobs``), ``skipped``
    the slots the overlap policy skipped, ``missed_slots`` the newest missed slots as
    recorded in the history (at most :data:`SLOT_HISTORY`) and ``missed`` how many
    were missed in all (a lower bound unless ``missed_exact``). ``fated`` is the
    newest slot that got a fate (None: none did). ``replace_job`` is the previous run
    the ``Replace`` policy cancels before the new one runs (None: nothing to cancel).
    """

    name: str
    ctid: str
    run: Sequence[dt.datetime]
    skipped: Sequence[dt.datetime]
    missed_slots: Sequence[dt.datetime]
    missed: int
    missed_exact: bool
    planned_until: dt.datetime
    next_slot: dt.datetime
    fated: dt.datetime | None
    jobs: list[JobRow]
    replace_job: int | None
    slot_rows: int
    prune: bool

    def write_into(self, write: PassWrite, *, replaced: int) -> None:
        """Add the schedule's write-back (once ``replaced`` previous runs were cancelled)
        and the fates of its slots (enqueued, then skipped, then missed) to ``write``.

        Value by value into the columns the statements send, not as row objects: a
        pass adds thousands (``python -m bench.schedules --planning``), so the fields
        are read in one unpacking and an enqueued slot's fate is appended in line.
        """
        (name, ctid, run, skipped, missed_slots, missed, _, planned_until, next_slot, fated,
         jobs, _, slot_rows, prune) = self
        last = jobs[-1] if jobs else None
        a = write.advances
        a.name.append(name)
        a.ctid.append(ctid)
        a.planned_until.append(planned_until)
        a.last_slot.append(fated)
        a.last_enqueued_slot.append(run[-1] if run else None)
        a.next_slot.append(next_slot)
        a.enqueued.append(len(run))  # less the duplicates, once the insert has told
        a.skipped.append(len(skipped))
        a.missed.append(missed)
        a.replaced.append(replaced)
        a.last_key.append(None if last is None else last.unique_key)
        a.last_job_id.append(None if last is None else last.id)
        a.error.append(None)
        a.slot_rows.append(slot_rows)
        f = write.fates
        for slot, job in zip(run, jobs, strict=True):
            f.name.append(name)
            f.slot.append(slot)
            f.fate.append("enqueued")
            f.unique_key.append(job.unique_key)
            f.job_id.append(job.id)
        for slot in skipped:
            _add_fate(f, name, slot, "skipped")
        for slot in missed_slots:
            _add_fate(f, name, slot, "missed")
        if prune:
            write.prune.append(name)

    def advance(self, *, replaced: int) -> Advance:
        """The schedule's write-back, as :meth:`write_into` adds it, as a row."""
        write = PassWrite()
        self.write_into(write, replaced=replaced)
        advance: Advance = write.advances.rows()[0]
        return advance

    def fates(self) -> list[FateRow]:
        """The fates of its slots, as :meth:`write_into` adds them, as rows."""
        write = PassWrite()
        self.write_into(write, replaced=0)
        fates: list[FateRow] = write.fates.rows()
        return fates


def _add_fate(f: FateColumns, name: str, slot: dt.datetime, fate: str) -> None:
    """A slot that got no job (skipped, missed)."""
    f.name.append(name)
    f.slot.append(slot)
    f.fate.append(fate)
    f.unique_key.append(None)
    f.job_id.append(None)


def decide(schedule: DueSchedule, plan: planning.DuePlan, expr: expressions.Expression, *,
           at: dt.datetime) -> ScheduleDecision:
    """The pass's decision for ``schedule`` at ``at``, given its catch-up ``plan``.

    ``plan`` may be shared with other schedules of the pass (same expression and
    planning point): it is read, never changed.
    """
    active = schedule.last_job_status in _ACTIVE
    run, skipped = by_overlap(plan.run, schedule.overlap, previous_active=active)
    replace_job = (schedule.last_job_id if run and schedule.overlap == "Replace" and active
                   else None)
    missed = (missed_slots(expr, plan.run, after=schedule.planned_until, at=at)
              if plan.missed else [])
    slot_rows, prune = history_rows(schedule.slot_rows,
                                    added=len(run) + len(skipped) + len(missed))
    # In the fields' order: a pass decides once per due schedule (see slot_jobs).
    return _new(ScheduleDecision, (
        schedule.name, schedule.ctid, run, skipped, missed, plan.missed, plan.missed_exact,
        plan.cursor, plan.next_slot,
        _newest_fated(plan, expr, after=schedule.planned_until, at=at),
        slot_jobs(schedule, run), replace_job, slot_rows, prune))


def by_overlap(runnable: Sequence[dt.datetime], overlap: Overlap, *,
               previous_active: bool) -> tuple[Sequence[dt.datetime], Sequence[dt.datetime]]:
    """``(run, skipped)``: the catch-up plan's runnable slots split by the overlap policy.

    ``Allow`` runs them all. ``Forbid`` runs none while the previous run is pending
    or processing, else only the oldest (the later ones would overlap it).
    ``Replace`` runs only the newest (the older ones are replaced before they could
    start; the previous run, if active, is cancelled).
    """
    if not runnable or overlap == "Allow":
        return runnable, ()
    if overlap == "Forbid":
        return ((), runnable) if previous_active else (runnable[:1], runnable[1:])
    return runnable[-1:], runnable[:-1]


def slot_jobs(schedule: DueSchedule, run: Sequence[dt.datetime]) -> list[JobRow]:
    """One job row per slot of ``run``: the first takes the id the claim drew for the
    schedule, a later one None until the runner draws more ids."""
    if not run:
        return []
    queue, priority, max_retries, timeout, idempotent, lease, on_busy = slots.job_fields(
        name=schedule.name, queue=schedule.queue, priority=schedule.priority,
        timeout_seconds=schedule.timeout_seconds, max_retries=schedule.max_retries,
        idempotent=schedule.idempotent, overlap=schedule.overlap)
    name, job_class, data, pod_run, job_id = (schedule.name, schedule.job_class,
                                              schedule.data, schedule.pod_run, schedule.job_id)
    # A pass builds thousands (one a schedule, mostly): a plain loop, and the rows made
    # as tuples are (``tuple.__new__``, in the fields' order), without the Python call
    # of the named tuple's ``__new__``; together half the cost of this function.
    jobs = []
    for slot in run:
        jobs.append(_new(JobRow, (queue, job_class, data, priority, max_retries, timeout,
                                  idempotent, slots.slot_key(name, slot), lease, name, on_busy,
                                  pod_run, job_id)))
        job_id = None
    return jobs


def history_rows(rows: int, *, added: int) -> tuple[int, bool]:
    """The schedule's history rows after the pass, and whether the pass prunes them.

    The count is an upper bound (a slot that already had a row takes the newer fate
    without a new row): past the bound plus the margin the pass prunes the history
    to the bound, so a prune walks a schedule's history once in SLOT_PRUNE_MARGIN
    passes instead of every pass (readers show the newest SLOT_HISTORY only).
    """
    rows += added
    if rows > SLOT_HISTORY + SLOT_PRUNE_MARGIN:
        return SLOT_HISTORY, True
    return rows, False


def missed_slots(expr: expressions.Expression, run: Sequence[dt.datetime],
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


def _newest_fated(plan: planning.DuePlan, expr: expressions.Expression, *,
                  after: dt.datetime, at: dt.datetime) -> dt.datetime | None:
    """The newest slot that got a fate. The plan considers slots newest first and a
    slot too old to run makes every older one too old, so when anything runs, the
    newest slot is among the runs; only an all-missed plan needs a lookup."""
    if plan.run:
        return plan.run[-1]
    if plan.missed:
        newest = expr.prev_at_or_before(at)
        return newest if newest is not None and newest > after else None
    return None
