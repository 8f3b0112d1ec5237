"""The operator's claim of pod runs: rows, attempts, and the row's lease in one pass.

Why the lease is taken here and not in the pod: a busy lease must cost no pod
(and no attempt). So right after the claim statement, each claimed row that names
a lease gets it (owner = the claim token, the fencing token recorded on the row);
when it is busy the row's ``on_busy`` rule is applied exactly as a worker's
exclusive extension applies it -- the same verdict and the same counters
(:mod:`jobwarden.coordination.onbusy`) -- and no claim is returned for it. The operator cannot
import job classes, so the row's ``on_busy`` (set by the ExclusiveJob or the
schedule) decides, ``defer`` when unset, and a ``fail`` is retried with the
default backoff.

The lease's lifetime covers the pod's start: the row's window (its lease TTL, or
timeout + max(60, timeout)) plus the start deadline, because nothing renews it
until ``jobwarden run-job`` runs in the pod; from then on run-job renews it with
the row's window on every heartbeat.

A claim whose reply was lost is resolved by asking (the tokens derive from a
batch id chosen here), never guessed; if the database stays away, what the claim
took is left to the reaper at the start deadline, and since the pod never started,
the reaper retries it whatever its idempotency (db/sql/jobs.sql, job_reap).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.coordination import onbusy
from jobwarden.jobs import definitions
from jobwarden.observability import metrics
from jobwarden.podruns import checks
from jobwarden.structs.jobs import Failure
from jobwarden.structs.leases import lease_name
from jobwarden.structs.podruns import PodClaimBatch, PodRunClaim, PodRunRow, slot_of
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database

logger = logging.getLogger("jobwarden.podruns")

#: How long a claim whose reply was lost is asked after before giving up to the reaper.
RESOLVE_SECONDS = 3.0


def claim_pod_runs(db: Database, *, pod_runs: Sequence[str], claimant: str,
                   start_deadline: float, limit: int) -> PodClaimBatch:
    """Claim up to ``limit`` due pod runs of the resources ``pod_runs`` for ``claimant``.

    Each claim counts an attempt and gets a fresh claim token; ``claimed_by`` is
    ``claimant`` until the pod starts; the reaper may reclaim it ``start_deadline``
    seconds from now if no pod started it. Rows whose lease was busy are not
    returned (no pod): they are counted in ``deferred``/``skipped``/``failed_busy``.
    Raises InvalidInput for bad arguments (nothing claimed) and DatabaseUnavailable
    when the database cannot be reached (what the claim took, if anything, is then
    the reaper's).
    """
    resources = checks.pod_runs(pod_runs)
    who = checks.claimant(claimant)
    deadline = checks.seconds(start_deadline, "start_deadline")
    count = checks.limit(limit)
    if not resources or count == 0:
        return PodClaimBatch(claims=[])
    batch = uuid.uuid4()
    try:
        rows = db.podruns.claim(pod_runs=resources, claimant=who, start_deadline=deadline,
                                limit=count, batch=batch)
    except errors.DatabaseUnavailable as exc:
        rows = _resolve(db, claimant=who, batch=batch, error=exc)
    claims: list[PodRunClaim] = []
    deferred = skipped = failed_busy = 0
    for row in rows:
        claim = row.claim
        metrics.prime_job(claim.queue, claim.job_class)
        metrics.JOB_QUEUE_WAIT.labels(claim.queue).observe(claim.queue_wait_seconds)
        if claim.lease_name is None:
            claims.append(_claim(row, lease=None, token=None))
            continue
        taken = _take_lease(db, row, claimant=who, start_deadline=deadline)
        if taken is None:
            continue
        if isinstance(taken, int):
            claims.append(_claim(row, lease=lease_name(claim.lease_name), token=taken))
            continue
        if taken.policy == "defer":
            deferred += 1
        elif taken.policy == "skip":
            skipped += 1
        else:
            failed_busy += 1
    return PodClaimBatch(claims=claims, deferred=deferred, skipped=skipped,
                         failed_busy=failed_busy)


def _resolve(db: Database, *, claimant: str, batch: uuid.UUID,
             error: errors.DatabaseUnavailable) -> list[PodRunRow]:
    """The rows a claim took although its reply was lost (asked, never guessed)."""
    waited = threading.Event()
    ends = time.monotonic() + RESOLVE_SECONDS
    while True:
        try:
            found = db.podruns.claims_of_batch(claimant=claimant, batch=batch)
        except errors.DatabaseUnavailable:
            if time.monotonic() >= ends:
                logger.warning("pod-run claim failed and cannot be resolved (the reaper will "
                               "retry what it took at the start deadline): %s", error)
                raise error from None
            waited.wait(0.1)  # a product back-off, not a test wait
            continue
        if found:
            logger.warning("recovered %d pod-run claim(s) whose reply was lost: job(s) %s",
                           len(found), ", ".join(str(r.claim.id) for r in found))
        return found


def _claim(row: PodRunRow, *, lease: str | None, token: int | None) -> PodRunClaim:
    claim = row.claim
    return PodRunClaim(
        job_id=claim.id, claim_token=str(claim.claim_token), attempt=claim.attempt,
        pod_run=row.pod_run, schedule_name=claim.schedule_name,
        slot=slot_of(claim.schedule_name, row.unique_key), job_class=claim.job_class,
        idempotent=claim.idempotent, timeout_seconds=claim.timeout_seconds,
        lease_name=lease, lease_token=token,
    )


def _take_lease(db: Database, row: PodRunRow, *, claimant: str,
                start_deadline: float) -> int | onbusy.BusyVerdict | None:
    """The lease's fencing token; or the busy verdict, applied; None: undecided.

    Undecided (the database went away between the claim and the lease): the claim
    is given back unrun when possible, else left to the reaper; no pod either way.
    """
    claim = row.claim
    assert claim.lease_name is not None
    name = lease_name(claim.lease_name)
    kind = onbusy.row_lease_kind(claim.lease_name)
    window = claim.lease_ttl_seconds or onbusy.lease_window(claim.timeout_seconds)
    try:
        found = db.leases.try_acquire(name=name, owner=str(claim.claim_token),
                                      ttl_seconds=window + start_deadline, host=claimant,
                                      job_id=claim.id, claim_token=claim.claim_token)
    except errors.DatabaseUnavailable as exc:
        logger.warning("pod run job %d: cannot take lease %r: %s", claim.id, name, exc)
        # If that fails too, the reaper retries it at the start deadline (it never started).
        with contextlib.suppress(errors.DatabaseUnavailable):
            db.jobs.release(job_id=claim.id, claim_token=claim.claim_token, delay_seconds=1.0)
        return None
    if found.acquired:
        assert found.token is not None
        return found.token
    busy = onbusy.verdict(found, policy=claim.on_busy)
    onbusy.count_busy(kind, busy, queue=claim.queue, job_class=claim.job_class)
    logger.info("pod run job %d (%s): lease %r busy (held by %s, %.1fs left): %s, no pod",
                claim.id, row.pod_run, name, busy.holder, found.retry_after, busy.policy)
    _record_busy(db, row, busy)
    return busy


def _record_busy(db: Database, row: PodRunRow, busy: onbusy.BusyVerdict) -> None:
    """Write the verdict fenced, then count it as the worker's outcomes are counted."""
    claim = row.claim
    labels = (claim.queue, claim.job_class)
    status: JobStatus | None
    if busy.policy == "defer":
        ok = db.jobs.release(job_id=claim.id, claim_token=claim.claim_token,
                             delay_seconds=busy.delay_seconds, deferral=True)
        status = JobStatus.PENDING if ok else None
    elif busy.policy == "skip":
        # dropped: a schedule slot's run never started is that slot's fate "dropped",
        # counted by the same statement, as for a worker's skip.
        ok = db.jobs.mark_cancelled(job_id=claim.id, claim_token=claim.claim_token,
                                    error=busy.error, dropped=True)
        status = JobStatus.CANCELLED if ok else None
    else:
        status = db.jobs.fail(Failure(
            id=claim.id, claim_token=claim.claim_token, error=busy.error, retryable=True,
            retry_in_seconds=definitions.Job.backoff(claim.attempt)))
    if status is None:
        operation = {"defer": "defer", "skip": "fail", "fail": "fail"}[busy.policy]
        metrics.JOBS_FENCED.labels(*labels, operation).inc()
        logger.warning("fenced %s of pod run job %d: its claim was taken over", operation,
                       claim.id)
    elif busy.policy == "defer":
        onbusy.count_deferral(*labels, "lease_busy")
    elif busy.policy == "skip":
        metrics.JOBS_CANCELLED.labels(*labels).inc()
    else:
        onbusy.count_failure(*labels, "lease_busy", status)
