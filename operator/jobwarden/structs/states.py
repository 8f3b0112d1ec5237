"""The one enum of job states, mirrored by the ``job_status`` type in the schema.

``pending``
    Waiting to run (possibly in the future, ``run_at``). Entered on enqueue, on a
    retry after a failed attempt, when a busy lease defers the job, when the
    reaper reclaims an idempotent job, and on a manual ``retry``. Left by a claim
    (-> processing) or a cancel (-> cancelled).
``processing``
    Claimed by a worker with a fresh claim token. Only the holder of that token
    may write the outcome; every such write is fenced on it. Left by the worker
    (completed, failed, pending for a retry or deferral, cancelled) or by the
    reaper when heartbeats stop (pending, failed or interrupted).
``completed``
    The attempt returned. Terminal. The stored result is kept, size-capped.
``failed``
    The last allowed attempt failed, or the failure cannot be retried. Terminal
    until a manual ``retry``.
``interrupted``
    A non-idempotent job whose worker vanished mid-run: it might have had side
    effects, so it is never started again automatically. Terminal until a manual
    ``retry``.
``cancelled``
    Cancelled before it ran, or it honoured a cancel request while running.
    Terminal until a manual ``retry``.
"""

from __future__ import annotations

import enum


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.INTERRUPTED, JobStatus.CANCELLED}
)
