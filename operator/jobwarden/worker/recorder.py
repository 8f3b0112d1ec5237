"""Writes attempt outcomes to the database, batched and fenced.

Why a separate thread: a slot should start its next job as soon as the last one
returns, not wait a round trip for the write. Completions that pile up while a
write is in flight go out together in one fenced UPDATE, which is what lets a
single worker run thousands of short jobs per second. Nothing is dropped when
the database is away: outcomes stay queued and the write is retried; if the
claim was reaped meanwhile, the write is fenced, logged and counted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.maintenance.looping import Progress
from jobwarden.structs.jobs import Completion, Failure
from jobwarden.structs.states import JobStatus
from jobwarden.worker.context import Attempt, Cancelled, Failed, Outcome, Released, Succeeded
from jobwarden.worker.results import cap_result

logger = logging.getLogger("jobwarden.worker")

#: How the reaper's last_error begins (job_reap in db/sql/jobs.sql).
REAPED_ERROR_PREFIX = "reaped: "

Recorded = Callable[[Attempt, Outcome, "JobStatus | None"], None]


class Recorder:
    def __init__(self, db: Database, *, on_recorded: Recorded,
                 backoff: Callable[[Attempt], float], result_max_bytes: int,
                 db_state: Callable[[bool], None],
                 on_written: Callable[[], None] | None = None) -> None:
        self._db = db
        self._on_recorded = on_recorded
        #: Called after each batch of outcomes reached the database (slots are free).
        self._on_written = on_written
        self._backoff = backoff
        self._result_max_bytes = result_max_bytes
        self._db_state = db_state
        self._queue: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._unwritten = 0
        self._lock = threading.Condition()
        #: The write in progress (the worker's /healthz reads it).
        self.progress = Progress("recorder")

    def submit(self, attempt: Attempt) -> None:
        with self._lock:
            self._unwritten += 1
        self._queue.put(attempt)

    def stop(self) -> None:
        self._queue.put(None)

    def idle(self, timeout: float) -> bool:
        """Wait until every submitted outcome was written (or fenced)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._unwritten:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def run(self) -> None:
        stopping = False
        backlog: list[Attempt] = []
        while not (stopping and not backlog):
            if not backlog:
                item = self._queue.get()
                if item is None:
                    stopping = True
                    continue
                backlog.append(item)
            while len(backlog) < 1000:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                backlog.append(item)
            before = len(backlog)
            self.progress.begin()
            try:
                self._write(backlog)
                self._db_state(True)
            except errors.DatabaseUnavailable as exc:
                self._db_state(False)
                logger.warning("cannot record %d outcome(s) yet, retrying: %s", len(backlog), exc)
                time.sleep(0.25)
            finally:
                self.progress.end()
                done = before - len(backlog)
                if done:
                    with self._lock:
                        self._unwritten -= done
                        self._lock.notify_all()
                    if self._on_written is not None:
                        self._on_written()

    def _write(self, backlog: list[Attempt]) -> None:
        """Write every outcome of ``backlog``, removing each one once it is recorded.

        When the database fails midway, what was recorded is gone from the list and
        the rest is retried; a retried write whose first try did commit (its reply
        was lost) finds its own effect and is a success, not a fence.
        """
        recorded: set[int] = set()
        try:
            self._write_all(backlog, recorded)
        finally:
            backlog[:] = [a for a in backlog if id(a) not in recorded]

    def _write_all(self, batch: list[Attempt], recorded: set[int]) -> None:
        completions = [a for a in batch if isinstance(a.outcome, Succeeded)]
        if completions:
            written = self._db.jobs.complete_many([
                Completion(
                    id=a.claim.id, claim_token=a.claim.claim_token,
                    result=cap_result(a.outcome.result, self._result_max_bytes)
                    if isinstance(a.outcome, Succeeded) else None,
                    lease_lost=a.outcome.lease_lost if isinstance(a.outcome, Succeeded)
                    else False,
                )
                for a in completions
            ])
            statuses = {i: JobStatus.COMPLETED for i in written}
            statuses.update(self._own_effects([a for a in completions
                                               if a.claim.id not in written]))
            for a in completions:
                assert a.outcome is not None
                recorded.add(id(a))
                self._on_recorded(a, a.outcome, statuses.get(a.claim.id))
        for a in batch:
            outcome = a.outcome
            if isinstance(outcome, Succeeded) or outcome is None:
                continue
            status: JobStatus | None
            if isinstance(outcome, Failed):
                status = self._db.jobs.fail(Failure(
                    id=a.claim.id, claim_token=a.claim.claim_token, error=outcome.error,
                    retryable=outcome.retryable, retry_in_seconds=self._backoff(a),
                ))
            elif isinstance(outcome, Cancelled):
                ok = self._db.jobs.mark_cancelled(job_id=a.claim.id,
                                                  claim_token=a.claim.claim_token,
                                                  error=outcome.error,
                                                  dropped=outcome.busy_skip)
                status = JobStatus.CANCELLED if ok else None
            else:
                assert isinstance(outcome, Released)
                ok = self._db.jobs.release(job_id=a.claim.id, claim_token=a.claim.claim_token,
                                           delay_seconds=outcome.delay_seconds,
                                           deferral=outcome.deferral)
                status = JobStatus.PENDING if ok else None
            if status is None:
                status = self._own_effects([a]).get(a.claim.id)
            recorded.add(id(a))
            self._on_recorded(a, outcome, status)

    def _own_effects(self, unmatched: list[Attempt]) -> dict[int, JobStatus]:
        """Of writes that matched nothing, those whose effect is already there.

        A fenced write matches nothing because the claim was reaped (or the row
        changed hands); a retried write matches nothing because its first try
        committed. The row tells them apart: it still carries this claim's token,
        in the state this outcome leads to, with this outcome's error -- the reaper
        writes its own (``reaped: ...``), and only this claim writes with its token.
        """
        if not unmatched:
            return {}
        found = self._db.jobs.claim_outcomes([(a.claim.id, a.claim.claim_token)
                                              for a in unmatched])
        ours: dict[int, JobStatus] = {}
        for a in unmatched:
            row = found.get(a.claim.id)
            if row is None:
                continue
            status, last_error = row
            outcome = a.outcome
            if isinstance(outcome, Succeeded):
                mine = status is JobStatus.COMPLETED
            elif isinstance(outcome, (Failed, Cancelled)):
                mine = status in (JobStatus.PENDING, JobStatus.FAILED, JobStatus.CANCELLED) \
                    and last_error == outcome.error
            else:
                mine = status is JobStatus.PENDING \
                    and not (last_error or "").startswith(REAPED_ERROR_PREFIX)
            if mine:
                logger.info("job %d attempt %d: outcome already recorded (its reply was "
                            "lost), not fenced", a.claim.id, a.claim.attempt)
                ours[a.claim.id] = status
        return ours
