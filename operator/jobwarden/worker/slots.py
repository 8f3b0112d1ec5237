"""The slot threads and the attempts a worker holds.

A claimed attempt is *in hand* from :meth:`Slots.accept` until its outcome was
written (:meth:`Slots.recorded`); the heartbeat thread beats exactly those.
Accepted attempts wait in a ready queue for one of ``concurrency`` slot
threads, each of which runs one attempt at a time through the
:class:`~jobwarden.worker.running.AttemptRunner`. An attempt accepted, or
taken from the queue, while the worker stops is given back at once (pending
again, attempt refunded), never started.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from jobwarden import logfields, metrics
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.states import JobStatus
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.context import Attempt, Outcome, Released
from jobwarden.worker.outcomes import Outcomes
from jobwarden.worker.running import AttemptRunner

logger = logging.getLogger("jobwarden.worker")


class Slots:
    """The ready queue, the attempts in hand and the slot threads' loop."""

    def __init__(self, runner: AttemptRunner, *, concurrency: int, capacity: Capacity,
                 outcomes: Outcomes, stopping: threading.Event) -> None:
        self.runner = runner
        self.concurrency = concurrency
        self.capacity = capacity
        self.running = Capacity(concurrency)
        self.outcomes = outcomes
        self._stopping = stopping
        self._ready: queue.Queue[Attempt | None] = queue.Queue()
        self._active: dict[int, Attempt] = {}
        self._active_lock = threading.Lock()
        #: Moving average of attempt durations, for automatic prefetch.
        self._avg_duration: float | None = None

    def average_duration(self) -> float | None:
        """Moving average of attempt durations in seconds (None before the first)."""
        return self._avg_duration

    def active(self) -> list[Attempt]:
        """Every attempt in hand: claimed and not yet recorded."""
        with self._active_lock:
            return list(self._active.values())

    def tracked(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` is still in hand (its outcome not yet written)."""
        with self._active_lock:
            return attempt.claim.id in self._active

    def accept(self, claim: ClaimedJob) -> None:
        """Take a claimed job in hand: queued for a slot, or given back if stopping."""
        attempt = Attempt(claim)
        self.capacity.take(1)
        with self._active_lock:
            self._active[claim.id] = attempt
        metrics.prime_job(claim.queue, claim.job_class)  # before any event of the job
        if self._stopping.is_set():
            self._give_back(attempt)
        else:
            self._ready.put(attempt)
        # After the hand-off: the slot thread wakes meanwhile (enqueue-to-start path).
        metrics.JOB_QUEUE_WAIT.labels(claim.queue).observe(claim.queue_wait_seconds)

    def _give_back(self, attempt: Attempt) -> None:
        self.runner.submit(attempt, Released(delay_seconds=0.0, deferral=False,
                                             reason="shutdown"))
        self.capacity.give(1)

    def slot_loop(self) -> None:
        """One ``slot-N`` thread: run ready attempts one at a time until told to end."""
        while True:
            attempt = self._ready.get()
            if attempt is None:
                return
            if self._stopping.is_set():
                self._give_back(attempt)
                continue
            self.running.take(1)
            started = time.perf_counter()
            try:
                self.runner.execute(attempt)
            finally:
                elapsed = time.perf_counter() - started
                previous = self._avg_duration
                self._avg_duration = elapsed if previous is None else 0.8 * previous + 0.2 * elapsed
                self.running.give(1)
                self.capacity.give(1)

    def release_unstarted(self) -> None:
        """Claimed but not started: back to pending at once, attempt refunded."""
        while True:
            try:
                attempt = self._ready.get_nowait()
            except queue.Empty:
                return
            if attempt is not None:
                self._give_back(attempt)

    def end_threads(self) -> None:
        """Tell every slot thread to return once it finished its current attempt."""
        for _ in range(self.concurrency):
            self._ready.put(None)

    def recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        """The recorder wrote an attempt's outcome: out of hand, then counted and hooked."""
        claim = attempt.claim
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue,
                               host=self.runner.host):
            with self._active_lock:
                self._active.pop(claim.id, None)
            self.outcomes.recorded(attempt, outcome, status)
