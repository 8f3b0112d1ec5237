"""Running one claimed attempt: the extension chain around the job's code, then its outcome.

The slot threads (:mod:`jobwarden.worker.slots`) call :meth:`AttemptRunner.execute`
for every attempt; so does a tick (``jobwarden tick`` or the ``/tick`` route),
which claims through the same registry and wants exactly the same semantics.
Nothing here knows about threads, claiming or shutdown: it runs one attempt in
the calling thread and hands its outcome to the recorder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.jobs import definitions
from jobwarden.observability import logfields, metrics
from jobwarden.worker import execution
from jobwarden.worker.context import Attempt, AttemptContext, Failed, Outcome
from jobwarden.worker.extensions import CallNext, Extension, WorkerExtension
from jobwarden.worker.recorder import Recorder

#: A class that does not import is recorded (job_class_failures) at most this often
#: per class and worker process (seconds).
CLASS_FAILURE_EVERY = 60.0

logger = logging.getLogger("jobwarden.worker")


class AttemptRunner:
    """Runs attempts for one worker (host): isolation, extensions, outcome submission.

    ``heartbeat_one`` answers ``Job.heartbeat()`` inside the job's code (the
    heartbeater's :meth:`~jobwarden.worker.heartbeats.Heartbeater.one`).
    """

    def __init__(self, db: Database, *, host: str, result_max_bytes: int,
                 isolation: execution.Isolation, extensions: Sequence[WorkerExtension],
                 recorder: Recorder,
                 heartbeat_one: Callable[[Attempt], tuple[bool, bool]]) -> None:
        self.db = db
        self.host = host
        self.result_max_bytes = result_max_bytes
        self.isolation = isolation
        self.extensions = extensions
        #: Those that wrap an attempt: the others' around_attempt is Extension's
        #: pass-through, a link per job that only calls the next one.
        self._wrapping = [ext for ext in extensions
                          if getattr(type(ext), "around_attempt", None)
                          is not Extension.around_attempt]
        self.recorder = recorder
        self._heartbeat_one = heartbeat_one
        self._failed_lock = threading.Lock()
        self._failed_classes: dict[str, float] = {}

    def execute(self, attempt: Attempt) -> None:
        """Run one claimed attempt in the calling thread and submit its outcome.

        Every log line written meanwhile carries the attempt's fields (logfields).
        """
        claim = attempt.claim
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue, host=self.host):
            self._execute(attempt)

    def _execute(self, attempt: Attempt) -> None:
        claim = attempt.claim
        if attempt.fenced:
            return self.submit(attempt, Failed(error="claim lost before start", reason="error"))
        try:
            job_class = definitions.resolve(claim.job_class)
        except errors.UnknownJob as exc:
            self._class_failed(claim.job_class, exc)
            return self.submit(attempt, execution.failure_from(exc, attempt))
        attempt.job_class = job_class  # the recorder's backoff and hooks reuse it

        def perform(context: AttemptContext) -> Outcome:
            attempt.start(thread_id=threading.get_ident())
            running = metrics.JOBS_RUNNING.labels(claim.queue)
            running.inc()
            started = time.perf_counter()
            try:
                return self.isolation.run(attempt, job_class, context)
            finally:
                running.dec()
                metrics.JOB_DURATION.labels(claim.queue, claim.job_class).observe(
                    time.perf_counter() - started
                )

        # The extensions wrap the attempt, the first one outermost (River's middleware):
        # each may answer without calling the next link (a busy lease never starts).
        call: CallNext = perform
        for ext in reversed(self._wrapping):
            call = _link(ext, attempt, job_class, call)
        context = AttemptContext(attempt, self._heartbeat_one, db=self.db,
                                 result_max_bytes=self.result_max_bytes)
        self.submit(attempt, call(context))

    def _class_failed(self, job_class: str, exc: errors.UnknownJob) -> None:
        """Record that this worker cannot import ``job_class`` (the operator reads it:
        a JobSchedule of that class is not Ready), at most once a minute per class:
        a queue full of such jobs costs one write a minute, not one per attempt."""
        now = time.monotonic()
        with self._failed_lock:
            last = self._failed_classes.get(job_class)
            if last is not None and now - last < CLASS_FAILURE_EVERY:
                return
            self._failed_classes[job_class] = now
        try:
            self.db.jobs.class_failed(job_class, error=str(exc), host=self.host)
        except Exception as record_exc:  # never in the way of the attempt's outcome
            logger.warning("cannot record that %r does not import: %s", job_class, record_exc)

    def submit(self, attempt: Attempt, outcome: Outcome) -> None:
        """Settle the attempt with ``outcome`` (first one wins) and queue its write."""
        if attempt.settle(outcome):
            self.recorder.submit(attempt)

    def time_out(self, attempt: Attempt) -> None:
        """An attempt ran past its hard deadline: a failed attempt, and its code stopped."""
        self.submit(attempt, execution.failure_from(errors.JobTimeout("timeout"), attempt))
        self.isolation.interrupt(attempt)


def _link(ext: WorkerExtension, attempt: Attempt, job_class: type[definitions.Job],
          call_next: CallNext) -> CallNext:
    """One link of the attempt chain: ``ext`` around everything after it."""
    return lambda context: ext.around_attempt(attempt, job_class, context, call_next)
