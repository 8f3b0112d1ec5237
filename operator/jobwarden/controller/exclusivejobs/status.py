"""What an ExclusiveJob's ``.status`` says, and the Event a phase change deserves: pure.

The phase from the job row (a deferred job is *Deferred*, ``onBusy: skip`` is
*Skipped*), the lease as it is now, and the Ready / Complete / Failed /
LeaseLost conditions.

Complete and Failed are a Job's terminal conditions, so ``kubectl wait
--for=condition=Complete`` (or ``Failed``) works on an ExclusiveJob: Complete
is True once the job succeeded; Failed is True once it failed for good, was
interrupted, or was skipped or cancelled (it finished without running to
success). Ready says whether the resource is healthy, with the phase as the
reason: False once its job failed (JobwardenResourceNotReady then fires after
its ``for``), True for a skip: ``onBusy: skip`` is normal operation.
Built from the shared parts of :mod:`jobwarden.controller.kube.status`;
unit-tested in tests/operator/test_status.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from jobwarden.controller.kube.status import (
    Condition,
    Event,
    kept_status,
    timestamp,
)
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
    out = kept_status(previous, EXCLUSIVE_KEYS, generation=generation, conditions=conditions,
                      now=now)
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


#: Phases after which nothing more happens to the job (Complete or Failed is True).
FINISHED_PHASES = frozenset({"Succeeded", "Failed", "Skipped"})
#: The most of a job's last error a condition message carries.
ERROR_MESSAGE_LIMIT = 1000


def _terminal(job: JobRecord, phase: Phase) -> tuple[Condition, Condition, Condition]:
    """Ready, Complete and Failed for a job in ``phase``."""
    where = f"job {job.id}"
    if phase == "Succeeded":
        message = f"{where} succeeded"
        return (Condition(type="Ready", status="True", reason="Succeeded", message=message),
                Condition(type="Complete", status="True", reason="Succeeded", message=message),
                Condition(type="Failed", status="False", reason="Succeeded", message=message))
    if phase == "Failed":
        reason = "Interrupted" if job.status is JobStatus.INTERRUPTED else "JobFailed"
        what = ("was interrupted (its worker died and the job is not idempotent)"
                if reason == "Interrupted" else f"failed after {job.attempts} attempt(s)")
        error = (job.last_error or "").strip()
        message = f"{where} {what}" + (f": {error[:ERROR_MESSAGE_LIMIT]}" if error else "")
        return (Condition(type="Ready", status="False", reason="Failed", message=message),
                Condition(type="Complete", status="False", reason="Failed", message=message),
                Condition(type="Failed", status="True", reason=reason, message=message))
    message = (f"{where} was skipped (lease busy with onBusy: skip, or cancelled); "
               "it did not run")
    return (Condition(type="Ready", status="True", reason="Skipped", message=message),
            Condition(type="Complete", status="False", reason="Skipped", message=message),
            Condition(type="Failed", status="True", reason="Skipped", message=message))


def exclusive_conditions(*, error: str | None, job: JobRecord | None,
                         lease_name: str | None) -> list[Condition]:
    if error is not None:
        return [Condition(type="Ready", status="False", reason="InvalidSpec", message=error)]
    if job is None:
        return [Condition(type="Ready", status="Unknown", reason="JobMissing",
                          message="the job row is gone (purged?)")]
    phase = exclusive_phase(job)
    conditions: list[Condition]
    if phase in FINISHED_PHASES:
        conditions = list(_terminal(job, phase))
    else:
        message = f"job {job.id} under lease {lease_name!r}"
        reason = "Enqueued" if phase == "Pending" else phase
        conditions = [Condition(type="Ready", status="True", reason=reason, message=message)]
        conditions += [Condition(type=kind, status="False", reason=reason,
                                 message=f"job {job.id} has not finished ({phase})")
                       for kind in ("Complete", "Failed")]
    if job.lease_lost:
        conditions.append(Condition(
            type="LeaseLost", status="True", reason="LeaseTakenOver",
            message="the lease was taken over before the job finished; the job still "
                    "completed"))
    return conditions


def finished_at(status: Mapping[str, Any]) -> dt.datetime | None:
    """When the resource's job finished, from its status; None while it has not.

    ``finishedAt`` (the job row's), else when Complete or Failed became True (a
    skipped job has no finish time of its own).
    """
    if status.get("phase") not in FINISHED_PHASES:
        return None
    stamps = [status.get("finishedAt")] + [
        c.get("lastTransitionTime") for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed")
        and c.get("status") == "True"]
    for stamp in stamps:
        if isinstance(stamp, str) and stamp:
            try:
                return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def expired(status: Mapping[str, Any], ttl: int | None, now: dt.datetime) -> bool:
    """``spec.ttlSecondsAfterFinished`` has passed since the job finished."""
    if ttl is None:
        return False
    finished = finished_at(status)
    return finished is not None and (now - finished).total_seconds() >= ttl


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
