"""The slot threads and the attempts a worker holds.

A claimed attempt is *in hand* from :meth:`Slots.accept` until its outcome was
written (:meth:`Slots.recorded`); the heartbeat thread beats exactly those.
Accepted attempts wait in a ready queue for one of ``concurrency`` slot
threads, each of which runs one attempt at a time through the
:class:`~jobwarden.worker.running.AttemptRunner`. An attempt accepted, or
taken from the queue, while the worker stops is given back at once (pending
again, attempt refunded), never started.

Slot threads start when there is work for them, not with the worker: an
attempt accepted while no started slot thread is idle starts the next one (up
to ``concurrency``), and a started thread stays. An idle worker holds no slot
thread (a thread's stack and malloc arena are ~17 KiB resident each; docs/
benchmarks.md, "Idle worker RSS"), a trickle of jobs keeps one, and a burst
starts as many as it fills. The rule that makes this safe: every accepted
attempt either takes the place of a thread that announced itself idle (it is
in, or about to enter, the queue's ``get``) or starts a new thread; only once
all ``concurrency`` threads exist may an attempt wait for a busy one, exactly
as when they all started up front.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from jobwarden.observability import logfields, metrics
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.states import JobStatus
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.context import Attempt, Outcome, Released, Succeeded
from jobwarden.worker.outcomes import Outcomes
from jobwarden.worker.running import AttemptRunner

logger = logging.getLogger("jobwarden.worker")


class Slots:
    """The ready queue, the attempts in hand and the slot threads' loop."""

    def __init__(self, runner: AttemptRunner, *, concurrency: int, capacity: Capacity,
                 outcomes: Outcomes, stopping: threading.Event,
                 spawn: Callable[[str, Callable[[], None]], None],
                 with_first: Sequence[tuple[str, Callable[[], None]]] = ()) -> None:
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
        self._spawn = spawn
        #: Threads that only attempts in hand need (the heartbeat): started with the first
        #: slot thread, before it, and never again.
        self._with_first = tuple(with_first)
        self._threads_lock = threading.Lock()
        #: Slot threads started so far (they never end before the worker stops).
        self.started = 0
        #: Started slot threads idle and not yet promised an accepted attempt.
        self._idle = 0

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
            self._ensure_thread()
        # After the hand-off: the slot thread wakes meanwhile (enqueue-to-start path).
        metrics.JOB_QUEUE_WAIT.labels(claim.queue).observe(claim.queue_wait_seconds)

    def _give_back(self, attempt: Attempt) -> None:
        self.runner.submit(attempt, Released(delay_seconds=0.0, deferral=False,
                                             reason="shutdown"))
        self.capacity.give(1)

    def _ensure_thread(self) -> None:
        """A slot thread for the attempt just queued: an idle one, else a new one if allowed."""
        with self._threads_lock:
            if self._idle > 0:
                self._idle -= 1  # that thread's next get() takes it (or an earlier one)
                return
            if self.started >= self.concurrency:
                return  # every slot busy: it waits for the first to finish, as always
            number = self.started
            self.started += 1
            if number == 0:
                for name, target in self._with_first:
                    self._spawn(name, target)
        self._spawn(f"slot-{number}", self.slot_loop)

    def slot_loop(self) -> None:
        """One ``slot-N`` thread: run ready attempts one at a time until told to end."""
        first = True
        while True:
            if not first:
                with self._threads_lock:
                    self._idle += 1
            first = False  # a new thread was started for an attempt already queued
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
        """Tell every slot thread to return once it finished its current attempt.

        Called once accepting has ended (the worker is stopping: :meth:`accept` starts
        no thread any more), so ``started`` is final.
        """
        with self._threads_lock:
            started = self.started
            self.started = self.concurrency  # none starts from here on
        for _ in range(started):
            self._ready.put(None)

    def recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        """The recorder wrote an attempt's outcome: out of hand, then counted and hooked."""
        claim = attempt.claim
        with self._active_lock:
            self._active.pop(claim.id, None)
        if status is not None and isinstance(outcome, Succeeded):
            # A recorded success logs nothing here (its hook runs on the hook thread):
            # no log fields to set, the common case of every job.
            self.outcomes.recorded(attempt, outcome, status)
            return
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue,
                               host=self.runner.host):
            self.outcomes.recorded(attempt, outcome, status)
