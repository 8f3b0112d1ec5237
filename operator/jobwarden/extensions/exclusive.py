"""Exclusive jobs and concurrency keys: the worker side of leases.

A job class opts in with ``exclusive = True`` (lease ``job:<class path>``), a
static ``concurrency_key`` or a ``concurrency_key_for(self, data)`` method
(lease ``key:<key>``; the method wins over the static key, a key implies
exclusive). The lifetime rules, and why:

- **Taken after the claim, before perform** (the extension's ``around_attempt``,
  which answers without running the attempt when the lease is busy), so a busy lease
  costs one claim and one release, never a run. The owner is the attempt's
  claim token: one attempt, one owner, and a reaped-and-reclaimed job is a
  different owner than the attempt that may still be running.
- **Window = timeout + max(60, timeout)**, the same window after which the
  claim itself can be reaped, so the lease never ends inside the attempt's
  time limit even without renewal.
- **Renewed by every heartbeat** (one statement for all of a worker's leases,
  owner- and token-fenced) and by ``Job.heartbeat()`` inside perform (at most
  once a second), so a run that keeps heartbeating keeps its lease.
- **Released after the run**, owner-fenced, on success or failure. This runs
  when the attempt's code has really stopped (the slot thread returned, the
  child process was killed, the coroutine was cancelled). Work that may still
  be running (a worker that exits with a thread still in perform, a crashed
  host) never releases: its lease is left to expire.
- **Busy**: ``on_busy = "defer"`` (default) gives the claim back: pending again
  at ``now + min(remaining lease, 30 s)`` with the attempt refunded, counted as
  skipped and deferred; a permanently busy key never exhausts retries.
  ``"skip"`` drops this run (recorded as cancelled with the reason, counted as
  skipped ``on_busy_skip``); ``"fail"`` is a failed attempt ``lease_busy``,
  retried like any failure.
- **Lost** (renewal or release finds another owner): a warning, the job is still
  recorded as completed (it ran) with ``lease_lost`` set, ``lease_lost`` counted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobwarden import errors
from jobwarden.coordination import onbusy
from jobwarden.jobs import definitions
from jobwarden.structs.leases import lease_name
from jobwarden.worker.context import (
    Attempt,
    AttemptContext,
    Cancelled,
    Failed,
    Outcome,
    Released,
    Succeeded,
)
from jobwarden.worker.extensions import CallNext, Extension

# The lock API (coordination.leases, where JobLease lives) is imported by the first attempt
# that takes a lease: a worker whose jobs take none never loads it
# (docs/benchmarks.md, "Idle worker RSS").
if TYPE_CHECKING:
    from jobwarden.coordination.leases import JobLease, LeaseKind
    from jobwarden.db.database import Database
    from jobwarden.structs.leases import Acquisition
    from jobwarden.worker.handle import WorkerHandle

logger = logging.getLogger("jobwarden.leases")

#: Job.heartbeat() inside perform renews at most this often (the worker's batch
#: heartbeat renews anyway; this only matters for very long heartbeat intervals).
IN_PERFORM_RENEW_SECONDS = 1.0


#: How long a job lease lives without renewal (shared with pod runs: onbusy.py).
lease_window = onbusy.lease_window
#: The metrics kind of a lease named on a job row (shared with pod runs: onbusy.py).
row_lease_kind = onbusy.row_lease_kind


def _blank(value: object) -> bool:
    return value is None or not str(value).strip()


def job_lease(job_class: type[definitions.Job], data: Any,
              class_path: str | None = None, *,
              row_lease: str | None = None) -> tuple[str, LeaseKind] | None:
    """The lease a run of ``job_class`` with ``data`` needs, or None.

    A lease named on the job row by whoever enqueued it (an ExclusiveJob
    resource's key, a Forbid schedule's ``schedule:<name>``) comes first: the
    enqueuer asked for exactly that exclusivity, and the operator that wrote it
    cannot import the class to know better. Otherwise the class decides:
    ``concurrency_key_for(data)`` (when overridden and not blank) >
    ``concurrency_key`` > ``exclusive``. Names over the column limit are hashed.
    """
    if row_lease:
        return lease_name(row_lease), row_lease_kind(row_lease)
    if definitions.overrides(job_class, "concurrency_key_for"):
        key = job_class().concurrency_key_for(data)
        if not _blank(key):
            return lease_name(f"key:{key}"), "key"
    if not _blank(job_class.concurrency_key):
        return lease_name(f"key:{job_class.concurrency_key}"), "key"
    if job_class.exclusive:
        return lease_name(f"job:{class_path or job_class.path()}"), "job"
    return None


def busy_outcome(attempt: Attempt, found: Acquisition, *, kind: LeaseKind,
                 policy: str | None) -> Outcome:
    """The outcome of an attempt whose lease was busy: the shared verdict (onbusy.py).

    Also used by ``jobwarden run-job`` when the lease handed to its pod was lost
    before the job started.
    """
    claim = attempt.claim
    busy = onbusy.verdict(found, policy=policy)
    onbusy.count_busy(kind, busy, queue=claim.queue, job_class=claim.job_class)
    logger.info("job %d (%s): lease %r busy (held by %s, %.1fs left): %s", claim.id,
                claim.job_class, found.name, busy.holder, found.retry_after, busy.policy)
    if busy.policy == "skip":
        return Cancelled(error=busy.error, busy_skip=True)
    if busy.policy == "fail":
        return Failed(error=busy.error, reason="lease_busy")
    return Released(delay_seconds=busy.delay_seconds, deferral=True, reason="lease_busy")


class ExclusiveJobs(Extension):
    """Takes, renews and releases the leases of a worker's exclusive attempts.

    A worker extension: ``around_attempt`` takes the lease (or answers busy),
    runs the attempt with ``Job.heartbeat()`` renewing it, and releases it the
    moment the code stopped; ``heartbeat`` renews every held lease at once.
    """

    def __init__(self, db: Database, *, host: str) -> None:
        self._db = db
        self._host = host
        self._held: dict[int, JobLease] = {}  # claim id -> the lease its attempt holds
        self._lock = threading.Lock()

    @classmethod
    def for_worker(cls, worker: WorkerHandle) -> ExclusiveJobs:
        return cls(worker.db, host=worker.host)

    def held(self, attempt: Attempt) -> JobLease | None:
        with self._lock:
            return self._held.get(attempt.claim.id)

    # -- guard: before perform ---------------------------------------------------------

    def guard(self, attempt: Attempt, job_class: type[definitions.Job]) -> Outcome | None:
        claim = attempt.claim
        try:
            wanted = job_lease(job_class, claim.data, claim.job_class,
                               row_lease=claim.lease_name)
        except Exception as exc:  # user code: a failed attempt, not a crash
            logger.warning("job %d: concurrency_key_for raised: %r", claim.id, exc)
            return Failed(error=f"concurrency_key_for raised {type(exc).__name__}: {exc}",
                          reason="error", exception=exc)
        if wanted is None:
            return None
        name, kind = wanted
        window = claim.lease_ttl_seconds or lease_window(claim.timeout_seconds)
        owner = str(claim.claim_token)
        sent = time.monotonic()
        try:
            found = self._db.leases.try_acquire(
                name=name, owner=owner, ttl_seconds=window, host=self._host,
                job_id=claim.id, claim_token=claim.claim_token,
            )
        except errors.DatabaseUnavailable as exc:
            logger.warning("job %d: cannot take lease %r: %s", claim.id, name, exc)
            return Released(delay_seconds=1.0, deferral=False, reason="database_unavailable")
        if found.acquired:
            from jobwarden.coordination.leases import JobLease

            assert found.token is not None
            attempt.lease_name = name
            attempt.lease_token = found.token
            held = JobLease(self._db, found, attempt=attempt, owner=owner, window=window,
                         kind=kind, requested_at=sent)
            with self._lock:
                self._held[claim.id] = held
            return None
        return busy_outcome(attempt, found, kind=kind,
                            policy=claim.on_busy or job_class.on_busy)

    def around_attempt(self, attempt: Attempt, job_class: type[definitions.Job],
                       context: AttemptContext, call_next: CallNext) -> Outcome:
        """Lease, run, release: the release comes the moment the code stopped.

        Why around the run and not after it: the outcome (a success that lost its
        lease must be recorded with ``lease_lost``) is decided after the release.
        The chain returns only once the attempt's code has really stopped (slot
        thread returned, child killed, coroutine cancelled), so releasing here never
        frees a lease under running work.
        """
        early = self.guard(attempt, job_class)
        if early is not None:
            return early
        if self.held(attempt) is None:
            return call_next(context)
        lost = False
        try:
            outcome = call_next(_RenewingContext(context, self))
        finally:
            lost = self.release(attempt)
        if lost and isinstance(outcome, Succeeded):
            return dataclasses.replace(outcome, lease_lost=True)
        return outcome

    # -- renewal -----------------------------------------------------------------------

    def heartbeat(self, alive: Sequence[Attempt]) -> None:
        self.renew_alive(alive)

    def renew_alive(self, alive: Sequence[Attempt]) -> None:
        """Heartbeat extension: renew every lease of the attempts still alive, at once."""
        with self._lock:
            pairs = [(a, self._held[a.claim.id]) for a in alive
                     if a.claim.id in self._held and not self._held[a.claim.id].lost]
        if not pairs:
            return
        sent = time.monotonic()
        kept = self._db.leases.renew_many([held.as_held() for _, held in pairs])
        for attempt, held in pairs:
            if (held.name, held.slot, held.token) in kept:
                held.extended(sent)
                continue
            with self._lock:
                # Released by its slot meanwhile: not lost, just over.
                current = self._held.get(attempt.claim.id) is held
            if current:
                held.mark_lost()

    def renew_one(self, attempt: Attempt) -> None:
        """From ``Job.heartbeat()`` inside perform, throttled; never raises."""
        held = self.held(attempt)
        if held is None or held.lost or time.monotonic() - held.renewed_at \
                < IN_PERFORM_RENEW_SECONDS:
            return
        try:
            held.extend()
        except errors.DatabaseUnavailable as exc:
            logger.debug("lease renewal failed: %s", exc)

    # -- release: after perform ----------------------------------------------------------

    def forget(self, attempt: Attempt) -> None:
        """Stop holding the attempt's lease here without a release (it was released
        with the attempt's outcome, in the same statement: ``jobwarden run-job``)."""
        with self._lock:
            held = self._held.pop(attempt.claim.id, None)
        if held is not None:
            held.abandon()

    def release(self, attempt: Attempt) -> bool:
        """Release the attempt's lease; True when it had been lost before the end.

        The slot does not wait for an unreachable database: after one failed try
        the lease is left to expire (its window), and no longer counted as held.
        """
        with self._lock:
            held = self._held.pop(attempt.claim.id, None)
        if held is None:
            return False
        if not held.lost:
            from jobwarden.coordination.leases import LeaseNotReleased

            held.lost_at = "release"
            try:
                held.release(retry_seconds=0)
            except LeaseNotReleased as exc:
                logger.warning("job %d: could not release lease %r (it will expire): %s",
                               attempt.claim.id, held.name, exc)
                held.abandon()
                return False
        return held.lost


class _RenewingContext(AttemptContext):
    """``Job.heartbeat()`` inside perform: the claim heartbeat, then the lease renewal."""

    def __init__(self, inner: AttemptContext, exclusive: ExclusiveJobs) -> None:
        super().__init__(inner.attempt, lambda _attempt: (True, False))
        self._inner = inner
        self._exclusive = exclusive

    def heartbeat(self) -> None:
        self._inner.heartbeat()
        self._exclusive.renew_one(self.attempt)
