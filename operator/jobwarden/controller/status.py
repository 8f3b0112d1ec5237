"""What a resource's ``.status`` should say, and which Events a change deserves: pure.

The handlers read rows, call these functions and write what they return; no
function here does I/O, so every decision (the phase of an ExclusiveJob, when a
condition's ``lastTransitionTime`` moves, which transition is worth an Event,
whether a status patch is needed at all) is unit-tested without a cluster or a
database (tests/operator/test_status.py).

Why patches are computed as a delta against the current status: the status
mirror runs every few seconds for every resource, and writing an unchanged
status still bumps ``resourceVersion`` and wakes every watcher. A mirror pass
that finds nothing new must send nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.leases import LeaseRecord
from jobwarden.structs.states import JobStatus

Phase = Literal["Pending", "Deferred", "Running", "Succeeded", "Failed", "Skipped"]
ConditionStatus = Literal["True", "False", "Unknown"]

#: Top-level status keys the operator owns, per kind (anything else is left alone).
SCHEDULE_KEYS = ("observedGeneration", "lastSlot", "nextRun", "lastJob", "counts", "conditions",
                 "active", "lastSuccessfulTime", "runNow")
EXCLUSIVE_KEYS = ("observedGeneration", "phase", "jobId", "attempts", "lease", "deferrals",
                  "leaseLost", "result", "startedAt", "finishedAt", "conditions")


def timestamp(value: dt.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as Kubernetes writes times (whole seconds)."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}")
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- conditions ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


def condition_of(conditions: Iterable[Mapping[str, Any]] | None,
                 kind: str) -> Mapping[str, Any] | None:
    for item in conditions or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def set_conditions(previous: Sequence[Mapping[str, Any]] | None, updates: Iterable[Condition],
                   *, generation: int | None, now: dt.datetime) -> list[dict[str, Any]]:
    """The new conditions list: ``updates`` applied over ``previous``.

    ``lastTransitionTime`` moves only when a condition's status changes (the
    Kubernetes convention: it says since when the status holds, not when we last
    looked). Conditions not in ``updates`` are kept as they were. Order is stable:
    existing types first, new ones appended.
    """
    out: list[dict[str, Any]] = [dict(c) for c in previous or () if isinstance(c, Mapping)]
    for update in updates:
        entry: dict[str, Any] = {"type": update.type, "status": update.status,
                                 "reason": update.reason, "message": update.message}
        if generation is not None:
            entry["observedGeneration"] = generation
        for index, old in enumerate(out):
            if old.get("type") == update.type:
                same = old.get("status") == update.status and old.get("lastTransitionTime")
                entry["lastTransitionTime"] = old["lastTransitionTime"] if same \
                    else timestamp(now)
                out[index] = entry
                break
        else:
            entry["lastTransitionTime"] = timestamp(now)
            out.append(entry)
    return out


def _same_conditions(a: Sequence[Mapping[str, Any]] | None,
                     b: Sequence[Mapping[str, Any]] | None) -> bool:
    return [dict(c) for c in a or ()] == [dict(c) for c in b or ()]


# -- patches ------------------------------------------------------------------------------


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any],
                 managed: Sequence[str]) -> dict[str, Any]:
    """A JSON merge patch for ``.status``: only the managed keys that differ.

    A managed key present now but absent from ``desired`` is removed (None).
    An empty result means: send nothing.
    """
    now = dict(current or {})
    patch: dict[str, Any] = {}
    for key in managed:
        if key in desired:
            if key == "conditions":
                if not _same_conditions(now.get(key), desired[key]):
                    patch[key] = desired[key]
            elif now.get(key) != desired[key]:
                patch[key] = desired[key]
        elif now.get(key) is not None:
            patch[key] = None
    return patch


# -- JobSchedule --------------------------------------------------------------------------


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


def schedule_conditions(*, action: ScheduleAction | None, error: str | None,
                        suspended: bool | None, row_name: str, row_source: str | None,
                        our_source: str) -> list[Condition]:
    """Ready / Conflicting / Suspended after one reconciliation.

    ``error`` set: the spec was refused (nothing else is decided, so only Ready
    changes). ``action`` conflict: Ready=False and Conflicting=True; the row keeps
    the other cluster's spec.
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


def schedule_status(*, previous: Mapping[str, Any] | None, generation: int | None,
                    view: ScheduleView | None, conditions: Iterable[Condition],
                    now: dt.datetime) -> dict[str, Any]:
    """The full desired status (managed keys); ``view`` None keeps the mirrored fields."""
    before = dict(previous or {})
    out: dict[str, Any] = {k: before[k] for k in SCHEDULE_KEYS if k in before}
    if generation is not None:
        out["observedGeneration"] = generation
    out["conditions"] = set_conditions(before.get("conditions"), conditions,
                                       generation=generation, now=now)
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
                         "missed": view.missed}
    return out


# -- ExclusiveJob -------------------------------------------------------------------------


def exclusive_phase(job: JobRecord) -> Phase:
    """The resource's phase from its job row.

    ``pending`` after a busy lease put it back is *Deferred* (it will run when the
    lease frees up; no attempt was used); ``cancelled`` is how the worker records
    ``onBusy: skip`` (and a user's cancel), so it is *Skipped*; ``interrupted``
    (a non-idempotent job whose worker died) did not succeed, so it is *Failed*.
    """
    match job.status:
        case JobStatus.PENDING:
            return "Deferred" if job.deferrals > 0 else "Pending"
        case JobStatus.PROCESSING:
            return "Running"
        case JobStatus.COMPLETED:
            return "Succeeded"
        case JobStatus.FAILED | JobStatus.INTERRUPTED:
            return "Failed"
        case JobStatus.CANCELLED:
            return "Skipped"
    raise AssertionError(f"unhandled job status {job.status!r}")


def exclusive_status(*, previous: Mapping[str, Any] | None, generation: int | None,
                     job: JobRecord | None, lease: LeaseRecord | None,
                     conditions: Iterable[Condition], now: dt.datetime) -> dict[str, Any]:
    """The full desired status (managed keys); ``job`` None keeps the mirrored fields.

    ``lease`` is the lease row as it is now: while it is held (by this job or, for a
    deferred job, by whoever blocks it) its holder, token and expiry are shown;
    when it is free, only the token this job last held remains.
    """
    before = dict(previous or {})
    out: dict[str, Any] = {k: before[k] for k in EXCLUSIVE_KEYS if k in before}
    if generation is not None:
        out["observedGeneration"] = generation
    out["conditions"] = set_conditions(before.get("conditions"), conditions,
                                       generation=generation, now=now)
    if job is None:
        return out
    for key in ("lease", "result", "startedAt", "finishedAt"):
        out.pop(key, None)
    out.update(phase=exclusive_phase(job), jobId=str(job.id), attempts=job.attempts,
               deferrals=job.deferrals, leaseLost=job.lease_lost)
    if job.result is not None:
        out["result"] = job.result
    if job.claimed_at is not None and job.status is not JobStatus.PENDING:
        out["startedAt"] = timestamp(job.claimed_at)
    if job.finished_at is not None:
        out["finishedAt"] = timestamp(job.finished_at)
    lease_status: dict[str, Any] = {}
    if lease is not None and lease.held:
        if lease.holder_host:
            lease_status["holder"] = lease.holder_host
        lease_status["token"] = lease.token
        if lease.expires_at is not None:
            lease_status["expiresAt"] = timestamp(lease.expires_at)
    elif job.lease_token is not None:
        lease_status["token"] = job.lease_token
    if lease_status:
        out["lease"] = lease_status
    return out


def exclusive_conditions(*, error: str | None, job: JobRecord | None,
                         lease_name: str | None) -> list[Condition]:
    if error is not None:
        return [Condition(type="Ready", status="False", reason="InvalidSpec", message=error)]
    if job is None:
        return [Condition(type="Ready", status="Unknown", reason="JobMissing",
                          message="the job row is gone (purged?)")]
    conditions = [Condition(type="Ready", status="True", reason="Enqueued",
                            message=f"job {job.id} under lease {lease_name!r}")]
    if job.lease_lost:
        conditions.append(Condition(
            type="LeaseLost", status="True", reason="LeaseTakenOver",
            message="the lease was taken over before the job finished; the job still "
                    "completed"))
    return conditions


# -- events -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def condition_events(previous: Sequence[Mapping[str, Any]] | None,
                     current: Sequence[Mapping[str, Any]]) -> list[Event]:
    """Events for the transitions between two condition lists worth telling a human."""
    events: list[Event] = []

    def changed(kind: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        return condition_of(previous, kind), condition_of(current, kind)

    old, new = changed("Ready")
    if new is not None and new.get("reason") == "InvalidSpec" and (
            old is None or old.get("reason") != "InvalidSpec"
            or old.get("message") != new.get("message")):
        events.append(Event(type="Warning", reason="InvalidSpec",
                            message=str(new.get("message", ""))))
    old, new = changed("Conflicting")
    was = old is not None and old.get("status") == "True"
    now = new is not None and new.get("status") == "True"
    if now and not was:
        events.append(Event(type="Warning", reason="SpecConflict",
                            message=str(new.get("message", "")) if new else ""))
    elif was and new is not None and not now:
        events.append(Event(type="Normal", reason="ConflictResolved",
                            message="the spec now matches the schedule row"))
    old, new = changed("Suspended")
    was = old is not None and old.get("status") == "True"
    now = new is not None and new.get("status") == "True"
    if now and not was:
        events.append(Event(type="Normal", reason="Suspended",
                            message="schedule suspended: no new slots are enqueued"))
    elif was and new is not None and not now:
        events.append(Event(type="Normal", reason="Resumed", message="schedule resumed"))
    old, new = changed("LeaseLost")
    if new is not None and new.get("status") == "True" and (
            old is None or old.get("status") != "True"):
        events.append(Event(type="Warning", reason="LeaseLost",
                            message=str(new.get("message", ""))))
    return events


def phase_event(previous: str | None, current: str | None, *,
                job_id: str | None) -> Event | None:
    """An Event when an ExclusiveJob's phase changes (not for the initial Pending)."""
    if current is None or current == previous or (previous is None and current == "Pending"):
        return None
    messages = {
        "Pending": f"job {job_id} is waiting for a worker",
        "Deferred": f"job {job_id} deferred: its lease is held elsewhere",
        "Running": f"job {job_id} is running",
        "Succeeded": f"job {job_id} succeeded",
        "Failed": f"job {job_id} failed",
        "Skipped": f"job {job_id} was skipped (lease busy with onBusy: skip, or cancelled)",
    }
    return Event(type="Warning" if current == "Failed" else "Normal", reason=current,
                 message=messages.get(current, current))
