"""The live state of one claimed attempt, shared by the threads that touch it.

Several threads look at an attempt: the slot thread running it, the heartbeat
thread (which learns when the claim was lost or a cancel was requested), the
watchdog (timeouts) and the recorder. Exactly one outcome may be settled per
attempt -- whichever of "perform returned", "timed out" or "fenced" happens
first -- so :meth:`Attempt.settle` is the single place that decides.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobwarden import errors
from jobwarden.jobs.definitions import Job
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.policies import FailureReason, ReleaseReason
from jobwarden.worker.results import cap_result

if TYPE_CHECKING:
    from jobwarden.db.database import Database


@dataclasses.dataclass(frozen=True, kw_only=True)
class Succeeded:
    result: Any
    lease_lost: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Failed:
    error: str
    reason: FailureReason
    retryable: bool = True
    exception: BaseException | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cancelled:
    error: str
    #: Never started: its lease was busy with on_busy = "skip" (a schedule slot's
    #: fate "dropped", recorded with the cancellation).
    busy_skip: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Released:
    """Give the claim back unrun: a busy lease (deferral) or shutdown."""

    delay_seconds: float
    deferral: bool
    reason: ReleaseReason


Outcome = Succeeded | Failed | Cancelled | Released


class Attempt:
    def __init__(self, claim: ClaimedJob) -> None:
        self.claim = claim
        self.claimed_monotonic = time.monotonic()
        self.started_monotonic: float | None = None
        self.deadline: float | None = None
        self.thread_id: int | None = None
        self.fenced = False
        self.cancel_requested = False
        self.outcome: Outcome | None = None
        #: The resolved job class, once the slot has imported it (None: unknown job).
        self.job_class: type[Job] | None = None
        self.lease_name: str | None = None
        self.lease_token: int | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.started_monotonic is not None and self.outcome is None

    def start(self, *, thread_id: int | None) -> None:
        self.thread_id = thread_id
        self.started_monotonic = time.monotonic()
        self.deadline = self.started_monotonic + self.claim.timeout_seconds

    def settle(self, outcome: Outcome) -> bool:
        """Record the outcome if none was recorded yet; True when this call won."""
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = outcome
            return True

    def timed_out(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline and self.outcome is None


class AttemptContext:
    """What ``Job.heartbeat()`` talks to inside a worker.

    The heartbeat is a fenced write of this one claim; a lost claim raises
    JobFenced, a requested cancel raises JobCancelled, a passed deadline raises
    JobTimeout -- so cooperative code stops at the next unit of work.
    """

    def __init__(self, attempt: Attempt,
                 beat: Callable[[Attempt], tuple[bool, bool]], *,
                 db: Database | None = None, result_max_bytes: int = 65536) -> None:
        self.attempt = attempt
        self._beat = beat
        self._db = db
        self._result_max_bytes = result_max_bytes

    def complete_in(self, conn: Any, result: Any) -> None:
        """The fenced completion of this claim inside the caller's transaction.

        Raises JobFenced when the claim was taken over (raised inside the
        transaction, it rolls the job's effects back). When the transaction
        commits, the worker's own completion of the attempt later finds the row
        completed under this claim's token and records it as done, not fenced.
        """
        if self._db is None:
            raise errors.ConfigurationError(
                "complete_in_transaction needs the worker's database (not available here)")
        claim = self.attempt.claim
        if not self._db.jobs.complete_in(conn, job_id=claim.id, claim_token=claim.claim_token,
                                         result=cap_result(result, self._result_max_bytes)):
            self.attempt.fenced = True
            raise errors.JobFenced(
                f"job {claim.id} attempt {claim.attempt} lost its claim: not completed")

    def heartbeat(self) -> None:
        attempt = self.attempt
        if attempt.deadline is not None and time.monotonic() >= attempt.deadline:
            raise errors.JobTimeout(f"job {attempt.claim.id} passed its timeout")
        if not attempt.fenced:
            alive, cancel = self._beat(attempt)
            if not alive:
                attempt.fenced = True
            if cancel:
                attempt.cancel_requested = True
        if attempt.fenced:
            raise errors.JobFenced(
                f"job {attempt.claim.id} attempt {attempt.claim.attempt} lost its claim"
            )
        if attempt.cancel_requested:
            raise errors.JobCancelled(f"job {attempt.claim.id} was cancelled")
