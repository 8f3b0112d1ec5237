"""The worker: claim, run, heartbeat, record -- each on its own named thread.

Threads (all started and supervised in :meth:`Worker.start`):

``fetch``      claims batches of due jobs for free slots; wakes on NOTIFY and polls.
``slot-N``     runs one attempt at a time (``concurrency`` of them).
``recorder``   writes outcomes, batched and fenced (see ``recorder.py``).
``heartbeat``  heartbeats every claim this process holds and enforces deadlines.
``maintain``   periodic tasks: the reaper, and the extensions' tasks.
``listen``     LISTEN for enqueue notifications (speed only; polling is the truth).

Extensions (exclusive jobs, the host registry, the schedule runner, the tick
route) change how the worker claims, runs, heartbeats and stops only through
the hooks of :class:`jobwarden.worker.extensions.WorkerExtension`; the worker
never imports one. :mod:`jobwarden.assembly` builds a worker with its extensions.

A thread that dies unexpectedly stops the process loudly (exit code 70) rather
than leaving a half-alive worker that claims jobs it will never finish.

Shutdown (SIGTERM): stop claiming, give back claimed-but-unstarted jobs, let
running attempts finish within ``shutdown_grace``, record their outcomes and
exit. A second signal, or the end of the grace period, exits at once; whatever
was still running is left to the reaper (its heartbeats stop), never lost.
"""

from __future__ import annotations

import importlib
import logging
import queue
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from jobwarden import definitions, errors, logfields, metrics, reaper
from jobwarden.db.database import Database, channel_name
from jobwarden.db.hosts import HOSTS_TOPIC
from jobwarden.health import HealthServer
from jobwarden.looping import TaskLoop
from jobwarden.settings import PREFETCH_WORK_SECONDS, WorkerSettings
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.states import JobStatus
from jobwarden.worker import execution
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.context import (
    Attempt,
    AttemptContext,
    Failed,
    Outcome,
    Released,
)
from jobwarden.worker.extensions import CallNext, PeriodicTask, WorkerExtension
from jobwarden.worker.heartbeats import Heartbeater
from jobwarden.worker.outcomes import FailureEvent, Outcomes, backoff
from jobwarden.worker.recorder import Recorder

logger = logging.getLogger("jobwarden.worker")

EXIT_OK = 0
EXIT_CRASHED = 70


__all__ = ["EXIT_CRASHED", "EXIT_OK", "ExtensionFactory", "FailureEvent", "PeriodicTask",
           "Worker"]

E = TypeVar("E")


def _imported_pairs(queues: tuple[str, ...]) -> list[tuple[str, str]]:
    """(queue, class path) of every imported job class whose queue this worker serves.

    Why: their rare-event counters are exported at 0 from the start, so the first
    event is an increase Prometheus can see (metrics.py, "Rare events").
    """
    pairs: list[tuple[str, str]] = []
    pending: list[type[definitions.Job]] = [definitions.Job]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is definitions.Job or cls is definitions.FunctionJob:
            continue
        if not queues or cls.queue in queues:
            pairs.append((cls.queue, cls.path()))
    return pairs


class Worker:
    """One worker process's engine; see the module docstring.

    ``extensions`` are factories called once, in order, with this worker once its
    own parts exist; the order is the order of their hooks (the first extension's
    ``around_attempt`` is the outermost).
    """

    def __init__(self, db: Database, settings: WorkerSettings, *,
                 extensions: Sequence[ExtensionFactory] = ()) -> None:
        self.db = db
        self.settings = settings
        self.host = settings.host
        for app in settings.apps:
            importlib.import_module(app)
        metrics.prime_jobs(_imported_pairs(settings.queues))
        self.outcomes = Outcomes(failure_hook=settings.failure_hook)
        self.capacity = Capacity(settings.concurrency + settings.max_prefetch)
        #: Moving average of attempt durations, for automatic prefetch.
        self._avg_duration: float | None = None
        self.running_slots = Capacity(settings.concurrency)
        self._ready: queue.Queue[Attempt | None] = queue.Queue()
        self._active: dict[int, Attempt] = {}
        self._active_lock = threading.Lock()
        self._wake = threading.Event()
        #: Set while the LISTEN connection is up (tests wait on it instead of sleeping).
        self.listening = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crash: str | None = None
        self._db_ok = False
        self._db_lock = threading.Lock()
        self._shutdown_lock = threading.Lock()
        self.isolation: execution.Isolation
        if settings.isolation == "process":
            from jobwarden.worker.processes import ProcessIsolation

            self.isolation = ProcessIsolation(apps=list(settings.apps), dsn=db.dsn,
                                              schema=db.schema,
                                              heartbeat_grace=settings.heartbeat_grace)
        else:
            self.isolation = execution.ThreadIsolation()
        self.recorder = Recorder(db, on_recorded=self._recorded, backoff=backoff,
                                 result_max_bytes=settings.result_max_bytes,
                                 db_state=self._set_db_state,
                                 on_written=self._outcomes_written)
        self.extensions: tuple[WorkerExtension, ...] = tuple(
            factory(self) for factory in extensions)
        #: Claims lock the host row and honour its cap (the host registry asks for it).
        self.capped_claims = any(ext.caps_claims for ext in self.extensions)
        self.heartbeater = Heartbeater(db, grace_seconds=settings.heartbeat_grace,
                                       extensions=self.extensions, db_state=self._set_db_state,
                                       timed_out=self._time_out)
        self.periodic: list[PeriodicTask] = [
            PeriodicTask(name="reaper", interval=settings.reap_interval, run=self.reap),
            *(task for ext in self.extensions for task in ext.periodic_tasks()),
        ]
        self.http: HealthServer | None = None
        if settings.http_port is not None:
            routes = {path: route for ext in self.extensions
                      for path, route in ext.routes().items()}
            self.http = HealthServer(host=settings.http_host, port=settings.http_port,
                                     ready=self.readiness, healthy=self.liveness,
                                     routes=routes)
        metrics.WORKER_SLOTS.set(settings.concurrency)

    # -- public --------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        self._spawn("fetch", self._fetch_loop)
        for n in range(self.settings.concurrency):
            self._spawn(f"slot-{n}", self._slot_loop)
        self._spawn("recorder", self.recorder.run)
        self._spawn("heartbeat", self._heartbeat_loop)
        self._spawn("maintain", self._maintenance_loop)
        self._spawn("listen", self._listen_loop, critical=False)
        if self.http is not None:
            self.http.start()
        logger.info("worker %s started: queues=%s concurrency=%d isolation=%s",
                    self.host, ",".join(self.settings.queues) or "*",
                    self.settings.concurrency, self.settings.isolation)

    def request_stop(self) -> None:
        """Begin a graceful stop (idempotent); a second call forces it."""
        if self._stopping.is_set():
            self._force.set()
        self._stopping.set()
        self._wake.set()

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (graceful, then forced on a second signal)."""

        def on_signal(signum: int, _frame: Any) -> None:
            logger.info("received %s: %s", signal.Signals(signum).name,
                        "stopping now" if self.stopping else "draining")
            self.request_stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        return self.wait()

    def wait(self) -> int:
        """Block until the worker stopped; returns the process exit code."""
        while not self._stopping.wait(0.5):
            self._supervise()
        return self._shutdown()

    def stop(self, timeout: float | None = None) -> int:
        """Stop from another thread (tests, ``jobwarden dev``): graceful then forced."""
        self.request_stop()
        return self._shutdown(timeout)

    def readiness(self) -> tuple[bool, str]:
        if self._crash:
            return False, "crashed"
        if self.stopping:
            return False, "stopping"
        if not self._db_ok:
            return False, "database unavailable"
        return True, "ready"

    def liveness(self) -> tuple[bool, str]:
        return (False, f"crashed: {self._crash}") if self._crash else (True, "alive")

    def active(self) -> list[Attempt]:
        with self._active_lock:
            return list(self._active.values())

    def wake(self) -> None:
        self._wake.set()

    def extension(self, kind: type[E]) -> E | None:
        """The extension of that class this worker was built with (tests, the CLI)."""
        return next((ext for ext in self.extensions if isinstance(ext, kind)), None)

    # -- threads -------------------------------------------------------------------

    def _spawn(self, name: str, target: Callable[[], None], *, critical: bool = True) -> None:
        def main() -> None:
            try:
                target()
            except BaseException as exc:
                if critical:
                    self._crash = f"thread {name} died: {type(exc).__name__}: {exc}"
                    logger.critical("%s\n%s", self._crash, traceback.format_exc())
                    self._stopping.set()
                    self._force.set()
                else:
                    logger.exception("thread %s died", name)

        thread = threading.Thread(target=main, name=f"jobwarden-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _supervise(self) -> None:
        if self._crash:
            self._stopping.set()

    def _set_db_state(self, ok: bool) -> None:
        with self._db_lock:
            if ok != self._db_ok:
                logger.log(logging.INFO if ok else logging.WARNING,
                           "database %s", "reachable" if ok else "unreachable")
            self._db_ok = ok
        metrics.DB_UP.set(1 if ok else 0)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the worker is stopping."""
        return self._stopping.wait(seconds)

    def _fetch_loop(self) -> None:
        failures = 0
        #: The batch of a claim that failed with its outcome unknown (the commit may
        #: have happened, the reply was lost): resolved by asking before claiming more.
        unresolved: uuid.UUID | None = None
        while not self.stopping:
            target = self.settings.concurrency + self._prefetch()
            in_flight = self.capacity.in_flight
            if in_flight >= target:
                self.capacity.wait_in_flight_below(target, 0.5)
                continue
            free = min(target - in_flight, self.capacity.free)
            # Cleared before the claim, not after: a NOTIFY that arrives while the
            # claim is in flight must still wake the wait below.
            self._wake.clear()
            try:
                if unresolved is not None:
                    self._resolve_claim(unresolved)
                    unresolved = None
                    continue  # then claim as usual, at once
                limit = self._claim_gate(free)
                batch = uuid.uuid4()
                unresolved = batch if limit > 0 else None
                claimed = self.db.jobs.claim(
                    host=self.host, limit=limit, grace_seconds=self.settings.heartbeat_grace,
                    queues=self.settings.queues or None, host_cap=self.capped_claims,
                    batch=batch,
                ) if limit > 0 else []
                unresolved = None
                self._set_db_state(True)
                failures = 0
            except errors.DatabaseUnavailable as exc:
                self._set_db_state(False)
                failures += 1
                logger.warning("claim failed: %s", exc)
                self._sleep(min(0.05 * 2 ** min(failures, 5), 1.0))  # resume promptly
                continue
            for claim in claimed:
                self._accept(claim)
            if claimed and len(claimed) >= limit:
                continue  # probably more due: claim again as soon as slots free up
            self._wake.wait(self.settings.poll_interval)
        if unresolved is not None:  # stopping: whatever it took is given back at once
            try:
                self._resolve_claim(unresolved)
            except errors.DatabaseUnavailable as exc:
                logger.warning("cannot tell what the last claim took (the reaper will): %s",
                               exc)

    def _resolve_claim(self, batch: uuid.UUID) -> None:
        """Accept the jobs a claim took although its reply was lost (given back if stopping).

        The worker chose the claim's batch id, from which the database derived
        the claim tokens: it asks which processing rows carry them, never guesses.
        """
        claimed = self.db.jobs.claims_of_batch(host=self.host, batch=batch,
                                                grace_seconds=self.settings.heartbeat_grace)
        self._set_db_state(True)
        if claimed:
            logger.warning("recovered %d claim(s) whose reply was lost: job(s) %s",
                           len(claimed), ", ".join(str(c.id) for c in claimed))
        for claim in claimed:
            self._accept(claim)

    def _claim_gate(self, free: int) -> int:
        """How many jobs may be claimed now: each extension may lower the count."""
        for ext in self.extensions:
            free = ext.claim_gate(free)
        return free

    def _prefetch(self) -> int:
        """How many jobs to hold claimed beyond the free slots right now."""
        if self.settings.prefetch is not None:
            return self.settings.max_prefetch
        average = self._avg_duration
        if average is None:
            return self.settings.concurrency
        wanted = int(PREFETCH_WORK_SECONDS * self.settings.concurrency / max(average, 1e-4))
        return min(wanted, self.settings.max_prefetch)

    def _accept(self, claim: ClaimedJob) -> None:
        attempt = Attempt(claim)
        self.capacity.take(1)
        with self._active_lock:
            self._active[claim.id] = attempt
        metrics.JOB_QUEUE_WAIT.labels(claim.queue).observe(claim.queue_wait_seconds)
        metrics.prime_job(claim.queue, claim.job_class)
        if self.stopping:
            self._give_back(attempt)
        else:
            self._ready.put(attempt)

    def _give_back(self, attempt: Attempt) -> None:
        if attempt.settle(Released(delay_seconds=0.0, deferral=False, reason="shutdown")):
            self.recorder.submit(attempt)
        self.capacity.give(1)

    def _slot_loop(self) -> None:
        while True:
            attempt = self._ready.get()
            if attempt is None:
                return
            if self.stopping:
                self._give_back(attempt)
                continue
            self.running_slots.take(1)
            started = time.perf_counter()
            try:
                self.execute(attempt)
            finally:
                elapsed = time.perf_counter() - started
                previous = self._avg_duration
                self._avg_duration = elapsed if previous is None else 0.8 * previous + 0.2 * elapsed
                self.running_slots.give(1)
                self.capacity.give(1)

    def execute(self, attempt: Attempt) -> None:
        """Run one claimed attempt in the calling thread and submit its outcome.

        The slot threads call it; so does a tick (``tick.py``), which claims
        through the same registry and wants exactly the same semantics. Every log
        line written meanwhile carries the attempt's fields (logfields).
        """
        claim = attempt.claim
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue, host=self.host):
            self._execute(attempt)

    def _execute(self, attempt: Attempt) -> None:
        claim = attempt.claim
        if attempt.fenced:
            return self._submit(attempt, Failed(error="claim lost before start", reason="error"))
        try:
            job_class = definitions.resolve(claim.job_class)
        except errors.UnknownJob as exc:
            return self._submit(attempt, execution.failure_from(exc, attempt))
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
        for ext in reversed(self.extensions):
            call = _link(ext, attempt, job_class, call)
        context = AttemptContext(attempt, self.heartbeater.one, db=self.db,
                                 result_max_bytes=self.settings.result_max_bytes)
        self._submit(attempt, call(context))

    def _submit(self, attempt: Attempt, outcome: Outcome) -> None:
        if attempt.settle(outcome):
            self.recorder.submit(attempt)

    def _time_out(self, attempt: Attempt) -> None:
        """An attempt ran past its hard deadline: a failed attempt, and its code stopped."""
        self._submit(attempt, execution.failure_from(errors.JobTimeout("timeout"), attempt))
        self.isolation.interrupt(attempt)

    def _heartbeat_loop(self) -> None:
        next_beat = time.monotonic() + self.settings.heartbeat_interval
        while not self._stopped.is_set():
            now = time.monotonic()
            self.heartbeater.enforce_deadlines(self.active(), now)
            if now >= next_beat:
                next_beat = now + self.settings.heartbeat_interval
                self._heartbeat_all()
            self._stopped.wait(0.1)

    def _heartbeat_all(self) -> None:
        self.heartbeater.beat(self.active(), tracked=self._tracked)

    def _tracked(self, attempt: Attempt) -> bool:
        with self._active_lock:
            return attempt.claim.id in self._active

    def _maintenance_loop(self) -> None:
        TaskLoop(self.periodic, stop=self._stopping, db_state=self._set_db_state).run()

    def _outcomes_written(self) -> None:
        """The recorder wrote outcomes: their slots, and units of a host cap, are free.

        A capped claim counts the host's running rows in the database, so it may
        only follow the write; and a capped fetch loop that got fewer jobs than
        it asked for (the cap, not an empty queue) would otherwise wait for its
        next poll with a free slot. Extensions tell sibling processes.
        """
        if self.capped_claims:
            self._wake.set()
        for ext in self.extensions:
            try:
                ext.outcomes_written()
            except errors.DatabaseUnavailable as exc:  # speed only: the poll still claims
                logger.warning("after outcomes were written: %s", exc)
            except Exception:
                logger.exception("extension failed after outcomes were written")

    def _listen_loop(self) -> None:
        # A capped host's processes also hear each other's freed slots (payload: host).
        topics = ("jobs", HOSTS_TOPIC) if self.capped_claims else ("jobs",)
        hosts_channel = channel_name(self.db.schema, HOSTS_TOPIC)
        listener = self.db.listener(*topics)
        try:
            while not self.stopping:
                try:
                    received = listener.wait(0.0 if not self.listening.is_set() else 1.0)
                    self.listening.set()  # LISTEN is in place: NOTIFYs now wake the fetcher
                    if any(channel != hosts_channel or payload == self.host
                           for channel, payload in received):
                        self._wake.set()
                except errors.DatabaseUnavailable:
                    self.listening.clear()
                    self._sleep(1.0)
        finally:
            listener.close()

    # -- outcomes --------------------------------------------------------------------

    def reap(self) -> int:
        # Refresh this process's own claims first: after an outage longer than the
        # grace (database down, process paused) they look stale, but they are alive
        # here, and reaping them would run their jobs twice.
        self._heartbeat_all()
        return reaper.reap(self.db)

    def _recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        claim = attempt.claim
        with logfields.attempt(job_id=claim.id, job_class=claim.job_class,
                               attempt=claim.attempt, queue=claim.queue, host=self.host):
            with self._active_lock:
                self._active.pop(claim.id, None)
            self.outcomes.recorded(attempt, outcome, status)

    # -- shutdown ------------------------------------------------------------------

    def _shutdown(self, timeout: float | None = None) -> int:
        with self._shutdown_lock:
            if self._stopped.is_set():
                return EXIT_CRASHED if self._crash else EXIT_OK
            return self._shutdown_locked(timeout)

    def _call_all(self, hook: str) -> None:
        for ext in self.extensions:
            try:
                getattr(ext, hook)()
            except Exception:
                logger.exception("%s of %s failed", hook, type(ext).__name__)

    def _release_unstarted(self) -> None:
        """Claimed but not started: back to pending at once, attempt refunded."""
        while True:
            try:
                attempt = self._ready.get_nowait()
            except queue.Empty:
                return
            if attempt is not None:
                self._give_back(attempt)

    def _shutdown_locked(self, timeout: float | None) -> int:
        grace = self.settings.shutdown_grace if timeout is None else timeout
        deadline = time.monotonic() + grace
        self._call_all("on_stopping")
        self._wake.set()
        for thread in self._threads:
            if thread.name == "jobwarden-fetch":
                thread.join(timeout=10)
        self._release_unstarted()
        for _ in range(self.settings.concurrency):
            self._ready.put(None)
        while not self._force.is_set():
            if self.running_slots.wait_all_free(min(0.2, max(deadline - time.monotonic(), 0))):
                break
            if time.monotonic() >= deadline:
                left = [a.claim.id for a in self.active() if a.running]
                logger.warning("shutdown grace over: leaving job(s) %s to the reaper", left)
                break
        self.recorder.idle(timeout=5.0 if not self._force.is_set() else 1.0)
        self.recorder.stop()
        self._stopped.set()
        if self.http is not None:
            self.http.close()
        self.isolation.close()
        self._call_all("on_stopped")
        self.outcomes.close()
        logger.info("worker %s stopped", self.host)
        return EXIT_CRASHED if self._crash else EXIT_OK


#: Builds one extension for a worker (called once, from ``Worker.__init__``).
ExtensionFactory = Callable[[Worker], WorkerExtension]


def _link(ext: WorkerExtension, attempt: Attempt, job_class: type[definitions.Job],
          call_next: CallNext) -> CallNext:
    """One link of the attempt chain: ``ext`` around everything after it."""
    return lambda context: ext.around_attempt(attempt, job_class, context, call_next)
