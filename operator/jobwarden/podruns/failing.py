"""A pod run whose pod failed: the dead-worker rules, fenced; and the running pod runs.

The operator watches the pods it created and calls :func:`fail_pod_run` when a
pod ended (or never started) without the job recording its outcome: an image
that cannot be pulled or a pod that cannot be scheduled within the start
deadline, an OOM kill, an eviction, a lost node, a container killed, the pod
deleted or replaced, or a pod that could not be created at all. One statement
(``pod_run_fail``) applies the rules a dead worker's claim gets from the reaper,
records the cause, writes the attempt history and releases the claim's lease.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors, textrules
from jobwarden.coordination import onbusy
from jobwarden.jobs import definitions
from jobwarden.observability import metrics
from jobwarden.podruns import checks
from jobwarden.structs.podruns import POD_FAILURE_CAUSES, PodFailureCause, RunningPodRun
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database

logger = logging.getLogger("jobwarden.podruns")

#: The longest message kept in last_error (the cause comes first).
MAX_MESSAGE_LENGTH = 2000


def failure_error(cause: str, message: str) -> str:
    """The job's last_error for a failed pod: ``pod <cause>: <message>``."""
    text = " ".join(message.split())[:MAX_MESSAGE_LENGTH]
    return f"pod {cause}: {text}" if text else f"pod {cause}"


def fail_pod_run(db: Database, job_id: int, claim_token: str | uuid.UUID, *,
                 cause: PodFailureCause, message: str) -> str | None:
    """End the pod run's claim by the dead-worker rules; its status after, or None.

    Fenced on (job_id, claim_token): when the claim is no longer valid (the job
    recorded its own outcome, was reaped, or was claimed again) nothing changes
    and None is returned. Otherwise: ``cancelled`` when a cancel was requested;
    ``pending`` (retried after the backoff) or ``failed`` (attempts used up) for an
    idempotent job, and for any job whose pod never started it (its code never
    ran); ``interrupted`` for a non-idempotent job that had started. The lease the
    claim held is released (fenced on owner = claim token and its token).
    Raises InvalidInput for an unknown cause or a malformed id/token.
    """
    wanted = checks.job_id(job_id)
    token = checks.claim_token(claim_token)
    if cause not in POD_FAILURE_CAUSES:
        raise errors.InvalidInput(f"unknown pod failure cause {cause!r}; one of "
                                  f"{', '.join(POD_FAILURE_CAUSES)}")
    if not isinstance(message, str):
        raise errors.InvalidInput("message must be a string")
    error = textrules.check_text(failure_error(cause, message), "message")
    return record(db, job_id=wanted, claim_token=token, error=error)


def record(db: Database, *, job_id: int, claim_token: uuid.UUID, error: str) -> str | None:
    """Write a pod run's end without an outcome (``error`` says why); status after, or None.

    Shared by :func:`fail_pod_run` (the operator saw the pod end) and ``jobwarden
    run-job`` (SIGTERM stopped the job before it finished): one rule, one count.
    """
    attempt = db.podruns.attempt_of(job_id=job_id, claim_token=claim_token)
    done = None if attempt is None else db.podruns.fail(
        job_id=job_id, claim_token=claim_token, error=error,
        retry_in_seconds=definitions.Job.backoff(attempt))
    if done is None:
        # The usual case for a pod that ran its job: the outcome was recorded before
        # the container ended, so its end is reported to a claim already closed.
        logger.debug("pod run job %d: %r reported after its claim ended (nothing changed)",
                    job_id, error)
        return None
    metrics.prime_job(done.queue, done.job_class)
    if done.status is JobStatus.INTERRUPTED:
        metrics.JOBS_INTERRUPTED.labels(done.queue, done.job_class).inc()
    else:
        onbusy.count_failure(done.queue, done.job_class, "pod_failure", done.status)
    logger.warning("pod run job %d (%s) attempt %d: %s -> %s", job_id, done.job_class,
                   attempt, error, done.status.value)
    return done.status.value


def running_pod_runs(db: Database, pod_runs: Sequence[str]) -> list[RunningPodRun]:
    """The processing pod runs of these resources, oldest first.

    ``cancel_requested`` marks a run a Replace (or ``jobs cancel``) asked to stop:
    the operator deletes its pod. ``heartbeat_at`` None means the pod has not
    started the job yet.
    """
    return db.podruns.running(checks.pod_runs(pod_runs))
