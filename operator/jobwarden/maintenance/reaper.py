"""Reclaiming claims whose heartbeats stopped, and counting what happened to them.

The decision is one statement in the database (``job_reap`` in db/sql/jobs.sql:
idempotent jobs back to pending or failed, non-idempotent ones interrupted);
this module is the one place that turns its result into metrics and log lines,
whoever runs it -- a worker, a tick, or the operator's reaper loop.
"""

from __future__ import annotations

import logging

from jobwarden.db.database import Database
from jobwarden.observability import metrics
from jobwarden.structs.states import JobStatus

logger = logging.getLogger("jobwarden.reaper")

_OUTCOME = {JobStatus.PENDING: "retried", JobStatus.INTERRUPTED: "interrupted"}


def reap(db: Database, *, limit: int = 500) -> int:
    """Reap stale claims; returns how many were reclaimed."""
    reaped = db.jobs.reap(limit=limit)
    for job in reaped:
        outcome = _OUTCOME.get(job.status, job.status.value)
        metrics.prime_job(job.queue, job.job_class)
        metrics.JOBS_REAPED.labels(job.queue, job.job_class, outcome).inc()
        if job.status is JobStatus.INTERRUPTED:
            metrics.JOBS_INTERRUPTED.labels(job.queue, job.job_class).inc()
        logger.warning("reaped job %d (%s) from %s -> %s", job.id, job.job_class,
                       job.claimed_by, job.status.value)
    return len(reaped)
