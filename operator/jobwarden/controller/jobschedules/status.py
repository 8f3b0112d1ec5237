"""What a JobSchedule's ``.status`` says after a reconciliation: pure.

The decision whether the database row is created, updated, left alone or in
conflict (first writer wins), the Ready / Conflicting / Suspended conditions
and the mirrored fields (last slot, next run, last job, counts). Built from the
shared parts of :mod:`jobwarden.controller.kube.status`; unit-tested in
tests/operator/test_status.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from jobwarden.controller.kube.status import (
    Condition,
    Event,
    condition_of,
    kept_status,
    timestamp,
)

#: Top-level status keys the operator owns (anything else is left alone).
SCHEDULE_KEYS = ("observedGeneration", "lastSlot", "nextRun", "lastJob", "counts", "conditions",
                 "active", "lastSuccessfulTime", "runNow")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleView:
    """What the status mirrors from a schedule row (and its last job)."""

    last_slot: dt.datetime | None
    next_slot: dt.datetime | None
    suspended: bool
    enqueued: int
    skipped: int
    missed: int
    last_job_id: int | None
    last_job_status: str | None
    last_job_finished_at: dt.datetime | None
    #: Later fates of enqueued slots (jobwarden.structs.schedules.SLOT_FATES).
    replaced: int = 0
    dropped: int = 0
    deferred: int = 0


ScheduleAction = Literal["create", "update", "none", "conflict"]


def decide_schedule(*, row_exists: bool, row_source: str | None, row_matches: bool,
                    our_source: str) -> ScheduleAction:
    """What to do with the database for a valid spec, given the row as it is.

    * no row: create it (this cluster becomes its source);
    * the row already says what the spec says: nothing, whoever wrote it (the
      same schedule from two clusters is one schedule, and not rewriting it
      keeps its source stable instead of flipping it on every pass);
    * written by this cluster, different: update it;
    * written elsewhere, different: a conflict. The first writer wins and the
      row is NOT overwritten, or two clusters would rewrite it back and forth.
    """
    if not row_exists:
        return "create"
    if row_matches:
        return "none"
    if row_source == our_source:
        return "update"
    return "conflict"


#: Ready=False reasons of a valid, stored schedule whose runs cannot work: each is
#: posted as a Warning Event when Ready turns to it.
NOT_READY_REASONS = ("SecretNotFound", "KeyNotFound", "JobClassNotImportable")


def class_problem(*, job_class: str, error: str | None, host: str | None,
                  at: dt.datetime | None) -> tuple[str, str]:
    """Ready's reason and message for a job class a worker could not import."""
    when = f" at {timestamp(at)}" if at is not None else ""
    return ("JobClassNotImportable",
            f"worker {host or '?'} cannot import the job class {job_class!r}{when}: "
            f"{error or 'unknown error'}; every run fails until the workers' image has it "
            "(cleared by the schedule's next success)")


def schedule_conditions(*, action: ScheduleAction | None, error: str | None,
                        suspended: bool | None, row_name: str, row_source: str | None,
                        our_source: str,
                        problem: tuple[str, str] | None = None) -> list[Condition]:
    """Ready / Conflicting / Suspended after one reconciliation.

    ``error`` set: the spec was refused (nothing else is decided, so only Ready
    changes). ``action`` conflict: Ready=False and Conflicting=True; the row keeps
    the other cluster's spec. ``problem`` (reason, message): the row matches the
    spec but its runs cannot work (the pod-run DSN Secret is missing, a worker
    cannot import the job class): Ready=False with that reason. Why Ready and not a
    condition of its own: Ready is what ``kubectl wait``, the printer column and
    the per-resource readiness gauge read; a schedule whose every run fails is not
    ready, whatever its row says.
    """
    if error is not None:
        return [Condition(type="Ready", status="False", reason="InvalidSpec", message=error)]
    if action == "conflict":
        owner = (row_source or "unknown").removeprefix("kubernetes:")
        message = (f"schedule {row_name!r} was applied with a different spec by {owner!r}; "
                   "that spec stays in force (first writer wins) until the specs agree or "
                   "it is deleted there")
        conditions = [
            Condition(type="Ready", status="False", reason="SpecConflict", message=message),
            Condition(type="Conflicting", status="True", reason="SpecConflict", message=message),
        ]
    elif problem is not None:
        conditions = [
            Condition(type="Ready", status="False", reason=problem[0], message=problem[1]),
            Condition(type="Conflicting", status="False", reason="NoConflict"),
        ]
    else:
        conditions = [
            Condition(type="Ready", status="True", reason="Synced",
                      message=f"schedule row {row_name!r} matches the spec"),
            Condition(type="Conflicting", status="False", reason="NoConflict"),
        ]
    if suspended is not None:
        conditions.append(Condition(
            type="Suspended", status="True" if suspended else "False",
            reason="Suspended" if suspended else "Active",
            message="no new slots are enqueued" if suspended else ""))
    return conditions


def problem_events(previous: Iterable[Mapping[str, Any]] | None,
                   current: Iterable[Mapping[str, Any]]) -> list[Event]:
    """A Warning Event when Ready turns to one of :data:`NOT_READY_REASONS` (or its
    message changes to another host's or class's failure), Normal ``Recovered`` when
    it leaves one for Ready=True."""
    old = condition_of(list(previous or []), "Ready") or {}
    new = condition_of(list(current), "Ready") or {}
    if new.get("reason") in NOT_READY_REASONS and (
            old.get("reason") != new.get("reason")):
        return [Event(type="Warning", reason=str(new["reason"]),
                      message=str(new.get("message", "")))]
    if old.get("reason") in NOT_READY_REASONS and new.get("status") == "True":
        return [Event(type="Normal", reason="Recovered",
                      message=f"{old.get('reason')} no longer: {new.get('message', '')}")]
    return []


def schedule_status(*, previous: Mapping[str, Any] | None, generation: int | None,
                    view: ScheduleView | None, conditions: Iterable[Condition],
                    now: dt.datetime) -> dict[str, Any]:
    """The full desired status (managed keys); ``view`` None keeps the mirrored fields."""
    out = kept_status(previous, SCHEDULE_KEYS, generation=generation, conditions=conditions,
                      now=now)
    if view is not None:
        for key in ("lastSlot", "nextRun", "lastJob"):
            out.pop(key, None)
        if view.last_slot is not None:
            out["lastSlot"] = timestamp(view.last_slot)
        if view.next_slot is not None and not view.suspended:
            out["nextRun"] = timestamp(view.next_slot)
        if view.last_job_id is not None:
            last_job: dict[str, Any] = {"id": str(view.last_job_id)}
            if view.last_job_status:
                last_job["status"] = view.last_job_status
            if view.last_job_finished_at is not None:
                last_job["finishedAt"] = timestamp(view.last_job_finished_at)
            out["lastJob"] = last_job
        out["counts"] = {"enqueued": view.enqueued, "skipped": view.skipped,
                         "missed": view.missed, "replaced": view.replaced,
                         "dropped": view.dropped, "deferred": view.deferred}
    return out
