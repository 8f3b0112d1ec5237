"""What an ExclusiveJob's ``.status`` says, and the Event a phase change deserves: pure.

The phase from the job row (a deferred job is *Deferred*, ``onBusy: skip`` is
*Skipped*), the lease as it is now, and the Ready / LeaseLost conditions.
Built from the shared parts of :mod:`jobwarden.controller.status`;
unit-tested in tests/operator/test_status.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from jobwarden.controller.status import Condition, Event, set_conditions, timestamp
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.leases import LeaseRecord
from jobwarden.structs.states import JobStatus

Phase = Literal["Pending", "Deferred", "Running", "Succeeded", "Failed", "Skipped"]

#: Top-level status keys the operator owns (anything else is left alone).
EXCLUSIVE_KEYS = ("observedGeneration", "phase", "jobId", "attempts", "lease", "deferrals",
                  "leaseLost", "result", "startedAt", "finishedAt", "conditions")


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
