"""``jobwarden run-job``: the process in a pod that runs one claimed pod run.

The operator claimed the job row and handed this process the claim (job id,
claim token, lease fencing token). This module runs that one attempt with the
worker's own machinery, not a copy of it: a worker object that is never started
(:class:`PodRunWorker`, built by :func:`jobwarden.assembly.build_pod_run_worker`)
supplies the execution path (extensions around perform, thread isolation, hooks,
the hard timeout), the heartbeater (claim heartbeats, cancel requests, lease
renewal, deadlines) and the fenced, batched outcome recorder. Step by step:

1. **Start, fenced** (``pod_run_start``): the claim must still be processing under
   the handed token (and the handed lease token). Otherwise the job does not run
   and the process exits :data:`EXIT_FENCED`. The start is recorded
   (``heartbeat_at``, ``claimed_by`` = this pod): from then on a failure of the
   pod follows the dead-worker rules for a *started* run.
2. **Run**: the attempt goes through the worker's attempt runner in a thread of
   its own; the heartbeater beats the claim every ``heartbeat_interval`` (the reap
   deadline moves to ``heartbeat_grace``), passes a requested cancel (Replace,
   ``jobs cancel``) to the job -- its next ``Job.heartbeat()`` raises
   ``JobCancelled`` -- renews the lease with the handed token and enforces the
   hard timeout.
3. **Outcome, fenced**: completed, failed (retried by the rules) or cancelled, as
   a worker records it; a write that matches nothing is fenced. The lease is
   released when the code stopped.
4. **SIGTERM** (the pod is being deleted: Replace, eviction, a drain): the job
   may finish within ``stop_grace`` (its outcome is recorded as usual). After
   that, or on a second signal, the run is *stopped*: recorded by the dead-worker
   rules for a started run (cancel requested -> cancelled; idempotent -> retried;
   non-idempotent -> interrupted), its lease released, exit :data:`EXIT_STOPPED`.
   SIGKILL leaves it to the operator's pod watch or the reaper, the same rules.

The exit code says what was recorded (docs/cli.md). Nothing here needs the
operator to be up: the database is the only peer.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
import uuid
from typing import Any

from jobwarden.db.database import Database
from jobwarden.extensions.exclusive import ExclusiveJobs
from jobwarden.observability import logfields
from jobwarden.podruns import failing
from jobwarden.podruns.leasing import PodRunLease
from jobwarden.settings import WorkerSettings
from jobwarden.structs.podruns import PodRunRow
from jobwarden.structs.states import JobStatus
from jobwarden.worker.context import Attempt, Cancelled, Failed, Outcome, Released, Succeeded
from jobwarden.worker.worker import Worker

__all__ = ["EXIT_CANCELLED", "EXIT_COMPLETED", "EXIT_FAILED", "EXIT_FENCED", "EXIT_NOT_RUN",
           "EXIT_STOPPED", "PodRunWorker", "RunJobSettings", "run_job", "start"]

logger = logging.getLogger("jobwarden.podruns")

#: Exit codes of ``jobwarden run-job`` (docs/cli.md; the CLI's own codes 2-9 apply too).
EXIT_COMPLETED = 0
#: A failed attempt was recorded (retried after the backoff, or failed for good).
EXIT_FAILED = 1
#: The claim is no longer this pod's: the job did not run, or its outcome was refused.
EXIT_FENCED = 10
#: The run was cancelled (a cancel request, Replace) or dropped by ``on_busy: skip``.
EXIT_CANCELLED = 11
#: The job did not run and is pending again, its attempt given back (a busy lease).
EXIT_NOT_RUN = 12
#: SIGTERM stopped the run before the job finished (recorded by the dead-worker rules).
EXIT_STOPPED = 13

#: The CLI's "database unavailable" (cli/__init__.py), when the outcome cannot be written.
EXIT_DB_UNAVAILABLE = 3

#: How long the recorded outcome is waited for (the database may be away), at least.
RECORD_WAIT_SECONDS = 30.0
#: After the outcome is recorded, how long the attempt's thread may take to return
#: (releasing its lease) before the process exits anyway and takes the code with it.
THREAD_WAIT_SECONDS = 5.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunJobSettings:
    """What ``jobwarden run-job`` needs beyond the worker's settings (docs/cli.md)."""

    job_id: int
    claim_token: uuid.UUID
    #: The lease's fencing token handed in (None: the claim took no lease).
    lease_token: int | None = None
    #: After SIGTERM, how long the job may take to finish before it is stopped.
    stop_grace: float = 20.0
    worker: WorkerSettings = dataclasses.field(default_factory=WorkerSettings)


class PodRunWorker(Worker):
    """A worker that is never started: its parts run the pod's one attempt.

    Why a subclass: run-job's exit code says what was recorded, and only the
    recorder's answer tells a written outcome from a fenced one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded = threading.Event()
        self.recorded_status: JobStatus | None = None

    def _recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        super()._recorded(attempt, outcome, status)
        self.recorded_status = status
        self.recorded.set()

    def adopt_lease(self, token: int) -> None:
        """The lease token to adopt, when none was handed in (see run_job)."""
        for extension in self.extensions:
            if isinstance(extension, PodRunLease):
                extension.adopt(token)


def start(db: Database, config: RunJobSettings) -> PodRunRow | None:
    """Record the start under the handed claim; None when it is no longer valid."""
    return db.podruns.start(job_id=config.job_id, claim_token=config.claim_token,
                            host=config.worker.host,
                            grace_seconds=config.worker.heartbeat_grace,
                            lease_token=config.lease_token)


def run_job(worker: PodRunWorker, row: PodRunRow, config: RunJobSettings) -> int:
    """Run the started claim ``row`` to a recorded outcome; returns the exit code.

    Installs SIGTERM/SIGINT handlers (call from the main thread). Without a handed
    lease token (a hand-made pod spec) the lease the claim recorded is adopted: it is
    this claim's either way (the start checked a handed one against it).
    """
    if config.lease_token is None and row.lease_token is not None:
        worker.adopt_lease(row.lease_token)
    return _PodRun(worker, row, config).run()


class _PodRun:
    def __init__(self, worker: PodRunWorker, row: PodRunRow, config: RunJobSettings) -> None:
        self.worker = worker
        self.row = row
        self.config = config
        self.attempt = Attempt(row.claim)
        self.stop = threading.Event()
        self.force = threading.Event()
        self.code_done = threading.Event()  # the attempt's thread returned
        self._record_since: float | None = None  # when the settled outcome began to wait

    def run(self) -> int:
        claim = self.row.claim
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue, host=self.worker.host):
            logger.info("run-job: job %d (%s) attempt %d of %s started", claim.id,
                        claim.job_class, claim.attempt, self.row.pod_run)
            self._signals()
            worker = self.worker
            recorder = threading.Thread(target=worker.recorder.run, daemon=True,
                                        name="jobwarden-run-job-recorder")
            recorder.start()
            beats_done = threading.Event()
            beat = threading.Thread(
                target=worker.heartbeater.run, args=(lambda: [self.attempt],),
                kwargs={"interval": worker.settings.heartbeat_interval, "until": beats_done,
                        "poll": 0.05}, daemon=True, name="jobwarden-run-job-heartbeat")
            beat.start()
            runner = threading.Thread(target=self._execute, daemon=True,
                                      name="jobwarden-run-job-attempt")
            runner.start()
            try:
                code = self._supervise()
            finally:
                beats_done.set()
                beat.join(timeout=5.0)
                worker.recorder.stop()
                recorder.join(timeout=5.0)
                worker.outcomes.close(wait=True)  # the hooks of the recorded outcome
                worker.isolation.close()
            logger.info("run-job: job %d exits %d", claim.id, code)
            return code

    def _signals(self) -> None:
        def on_signal(signum: int, _frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.stop.is_set():
                logger.warning("run-job: %s again: stopping the job now", name)
                self.force.set()
            else:
                logger.warning("run-job: %s: the job may finish within %gs", name,
                               self.config.stop_grace)
            self.stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _execute(self) -> None:
        try:
            self.worker.execute(self.attempt)  # extensions (lease) around perform, then submit
        finally:
            self.code_done.set()

    def _supervise(self) -> int:
        """Wait for the recorded outcome, or stop the run after SIGTERM and its grace."""
        grace_ends: float | None = None
        while not self.worker.recorded.is_set():
            if self.stop.is_set() and self.attempt.outcome is None:
                if grace_ends is None:
                    grace_ends = time.monotonic() + self.config.stop_grace
                if self.force.is_set() or time.monotonic() >= grace_ends:
                    return self._stopped()
            if self.attempt.outcome is not None and self._record_overdue():
                logger.warning("run-job: job %d: outcome not recorded (database away?); the "
                               "claim is left to the reaper", self.row.claim.id)
                return EXIT_FENCED if self.attempt.fenced else EXIT_DB_UNAVAILABLE
            self.worker.recorded.wait(0.05)
        if not self.code_done.wait(THREAD_WAIT_SECONDS):
            # Recorded (a timeout) but the code is still inside a C call: the process
            # exit stops it; the lease goes first so the next run need not wait for it.
            logger.warning("run-job: job %d: its code did not return; exiting takes it "
                           "down", self.row.claim.id)
            self._release_lease()
        return self._exit_code()

    def _record_overdue(self) -> bool:
        now = time.monotonic()
        if self._record_since is None:
            self._record_since = now
        return now - self._record_since > max(RECORD_WAIT_SECONDS,
                                              self.worker.settings.heartbeat_grace)

    def _exit_code(self) -> int:
        status = self.worker.recorded_status
        outcome = self.attempt.outcome
        if status is None:
            return EXIT_FENCED
        if isinstance(outcome, Succeeded):
            return EXIT_COMPLETED
        if isinstance(outcome, Cancelled) or status is JobStatus.CANCELLED:
            return EXIT_CANCELLED
        if isinstance(outcome, Failed):
            return EXIT_FAILED
        assert isinstance(outcome, Released)
        return EXIT_NOT_RUN

    def _stopped(self) -> int:
        """SIGTERM and the grace is over: record the stop by the dead-worker rules."""
        attempt = self.attempt
        grace = self.config.stop_grace
        if not attempt.settle(Released(delay_seconds=0.0, deferral=False, reason="shutdown")):
            # The job finished at the last moment: its own outcome is being recorded.
            self.worker.recorded.wait(RECORD_WAIT_SECONDS)
            return self._exit_code()
        self.worker.isolation.interrupt(attempt)
        # The outcome is settled: whatever the code still returns is never written.
        status = failing.record(
            self.worker.db, job_id=attempt.claim.id, claim_token=attempt.claim.claim_token,
            error=f"pod stopped: SIGTERM, the job did not finish within the {grace:g}s "
                  "stop grace")
        self._forget_lease()  # released by the same statement, fenced on this claim
        if status is None:
            logger.warning("run-job: job %d: stop not recorded, the claim was no longer "
                           "valid", attempt.claim.id)
            return EXIT_FENCED
        logger.warning("run-job: job %d stopped by SIGTERM -> %s", attempt.claim.id, status)
        return EXIT_STOPPED

    def _release_lease(self) -> None:
        for extension in self.worker.extensions:
            if isinstance(extension, ExclusiveJobs):
                extension.release(self.attempt)

    def _forget_lease(self) -> None:
        for extension in self.worker.extensions:
            if isinstance(extension, ExclusiveJobs):
                extension.forget(self.attempt)
