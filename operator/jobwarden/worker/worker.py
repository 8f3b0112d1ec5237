"""The worker: its parts put together, started, supervised and stopped.

Each concern lives in a module of its own; this one only composes them and
owns the lifecycle (start, signals, graceful and forced stop, readiness):

- claiming (``fetch`` and ``listen`` threads): :mod:`jobwarden.worker.claiming`
- the slots and the attempts in hand: :mod:`jobwarden.worker.slots`
- running one attempt through the extension chain: :mod:`jobwarden.worker.running`
- heartbeats and deadlines: :mod:`jobwarden.worker.heartbeats`
- writing outcomes, and what follows them: :mod:`jobwarden.worker.recorder`,
  :mod:`jobwarden.worker.outcomes`
- the threads and their crash rule: :mod:`jobwarden.worker.threads`

Threads (started in :meth:`Worker.start`, except the slots and the heartbeat):

``fetch``      claims batches of due jobs for free slots; wakes on NOTIFY and polls.
``slot-N``     runs one attempt at a time (up to ``concurrency`` of them, each started
               by the first attempt no started slot was free for: an idle worker has none).
``recorder``   writes outcomes, batched and fenced (see ``recorder.py``).
``heartbeat``  heartbeats every claim this process holds and enforces deadlines
               (started with the first slot thread: an idle worker has no claim).
``maintain``   periodic tasks: the reaper, and the extensions' tasks.
``listen``     LISTEN for enqueue notifications and claim at once (speed only; polling is
               the truth).

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

import dataclasses
import importlib
import logging
import math
import signal
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from jobwarden.db.database import Database
from jobwarden.jobs import definitions
from jobwarden.maintenance import reaper
from jobwarden.maintenance.looping import TaskLoop, stalled
from jobwarden.observability import metrics
from jobwarden.settings import WorkerSettings
from jobwarden.structs.states import JobStatus
from jobwarden.worker import execution
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.claiming import Claimer
from jobwarden.worker.context import Attempt, Outcome
from jobwarden.worker.extensions import ExtensionFactory, PeriodicTask, WorkerExtension
from jobwarden.worker.handle import WorkerHandle
from jobwarden.worker.heartbeats import Heartbeater
from jobwarden.worker.outcomes import FailureEvent, Outcomes, backoff
from jobwarden.worker.recorder import Recorder
from jobwarden.worker.running import AttemptRunner
from jobwarden.worker.slots import Slots
from jobwarden.worker.threads import Threads

if TYPE_CHECKING:
    from jobwarden.observability.health import HealthServer

logger = logging.getLogger("jobwarden.worker")

EXIT_OK = 0
EXIT_CRASHED = 70
#: A pooled connection no call used for this long is closed (``Pool.trim``): an idle
#: worker holds only its LISTEN connection between its rare calls (issue 31).
TRIM_SECONDS = 2.0


__all__ = ["EXIT_CRASHED", "EXIT_OK", "ExtensionFactory", "FailureEvent", "PeriodicTask",
           "Worker", "WorkerHandle"]

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

    ``extensions`` are factories called once, in order, with this worker's
    :class:`~jobwarden.worker.handle.WorkerHandle` (``self.handle``); the order is
    the order of their hooks (the first extension's ``around_attempt`` is the
    outermost).
    """

    def __init__(self, db: Database, settings: WorkerSettings, *,
                 extensions: Sequence[ExtensionFactory] = ()) -> None:
        self.db = db
        self.settings = settings
        self.host = settings.host
        _fit_heartbeat_bound(db, settings)
        for app in settings.apps:
            importlib.import_module(app)
        metrics.prime_jobs(_imported_pairs(settings.queues))
        self.outcomes = Outcomes(failure_hook=settings.failure_hook)
        self.capacity = Capacity(settings.concurrency + settings.max_prefetch)
        self._stopping = threading.Event()
        #: The signal that first asked :meth:`run` to stop (the CLI exits 130 on SIGINT).
        self.stop_signal: int | None = None
        self._stopped = threading.Event()
        self._force = threading.Event()
        self._threads = Threads(on_crash=self._crashed)
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
        #: What the extensions are given of this worker (and a tick of it).
        self.handle = self._handle()
        self.extensions: tuple[WorkerExtension, ...] = tuple(
            factory(self.handle) for factory in extensions)
        self.heartbeater = Heartbeater(db, grace_seconds=settings.heartbeat_grace,
                                       extensions=self.extensions, db_state=self._set_db_state,
                                       timed_out=self._time_out)
        self.runner = AttemptRunner(db, host=self.host,
                                    result_max_bytes=settings.result_max_bytes,
                                    isolation=self.isolation, extensions=self.extensions,
                                    recorder=self.recorder, heartbeat_one=self.heartbeater.one)
        self.slots = Slots(self.runner, concurrency=settings.concurrency,
                           capacity=self.capacity, outcomes=self.outcomes,
                           stopping=self._stopping, spawn=self._threads.spawn,
                           # Nothing to beat or time out before an attempt is in hand.
                           with_first=[("heartbeat", self._heartbeat_loop)])
        #: The slots running an attempt right now (shutdown waits for all to be free).
        self.running_slots = self.slots.running
        self.claimer = Claimer(db, settings, capacity=self.capacity,
                               extensions=self.extensions, stopping=self._stopping,
                               db_state=self._set_db_state, accept=self.slots.accept,
                               average_duration=self.slots.average_duration)
        #: Claims lock the host row and honour its cap (the host registry asks for it).
        self.capped_claims = self.claimer.capped_claims
        #: Set while the LISTEN connection is up (tests wait on it instead of sleeping).
        self.listening = self.claimer.listening
        self.periodic: list[PeriodicTask] = [
            PeriodicTask(name="reaper", interval=settings.reap_interval, run=self._reap_due),
            *(task for ext in self.extensions for task in ext.periodic_tasks()),
            # No database call: closes the pooled connection of a process at rest.
            PeriodicTask(name="connections", interval=TRIM_SECONDS,
                         run=lambda: db.connections.trim(TRIM_SECONDS)),
        ]
        self._reaped_at = -math.inf
        self.http: HealthServer | None = None
        if settings.http_port is not None:
            from jobwarden.observability.health import HealthServer

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
        self._threads.spawn("fetch", self.claimer.fetch_loop)
        # No slot thread yet: the first attempts start them (slots.py).
        self._threads.spawn("recorder", self.recorder.run)
        self._threads.spawn("maintain", self._maintenance_loop)
        # Critical: it claims (a listener that cannot connect only waits and retries).
        self._threads.spawn("listen", self.claimer.listen_loop)
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
        self.claimer.wake()

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (graceful, then forced on a second signal)."""

        def on_signal(signum: int, _frame: Any) -> None:
            if self.stop_signal is None:
                self.stop_signal = signum
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
        if self._threads.crash:
            return False, "crashed"
        if self.stopping:
            return False, "stopping"
        if not self._db_ok:
            return False, "database unavailable"
        return True, "ready"

    def liveness(self) -> tuple[bool, str]:
        """Not alive when a thread crashed or a loop is stuck in one round (see
        ``looping.Progress``): the heartbeat loop, a claim round, the recorder."""
        crash = self._threads.crash
        if crash:
            return False, f"crashed: {crash}"
        stuck = stalled([self.heartbeater.progress, self.claimer.progress,
                         self.recorder.progress], self.settings.stall_seconds)
        return (False, stuck) if stuck else (True, "alive")

    def active(self) -> list[Attempt]:
        """Every attempt this process holds (claimed, outcome not yet written)."""
        return self.slots.active()

    def wake(self) -> None:
        """Claim now instead of at the next poll."""
        self.claimer.wake()

    def extension(self, kind: type[E]) -> E | None:
        """The extension of that class this worker was built with (tests, the CLI)."""
        return next((ext for ext in self.extensions if isinstance(ext, kind)), None)

    def execute(self, attempt: Attempt) -> None:
        """Run one claimed attempt in the calling thread and submit its outcome.

        The slot threads' path (:class:`~jobwarden.worker.running.AttemptRunner`);
        a tick (``tick/``) calls it to run its attempt with exactly the same semantics.
        """
        self.runner.execute(attempt)

    def _reap_due(self) -> int:
        """The periodic reaper: every ``reap_interval`` while this process holds a
        claim, else at the idle pace (``idle_seconds``).

        Why: the reaper serves the fleet (it reclaims other processes' dead claims),
        and every idle worker's pass is a transaction the database pays; a fleet at
        rest still reaps every ``idle_seconds / N`` (docs/capacity-planning.md), and a
        busy worker at its own pace.
        """
        idle = self.capacity.in_flight == 0
        pace = max(self.settings.reap_interval, self.settings.idle_seconds) if idle else 0.0
        if time.monotonic() - self._reaped_at < pace * 0.95:
            return 0
        self._reaped_at = time.monotonic()
        return self.reap()

    def reap(self) -> int:
        # Refresh this process's own claims first: after an outage longer than the
        # grace (database down, process paused) they look stale, but they are alive
        # here, and reaping them would run their jobs twice.
        self._heartbeat_all()
        return reaper.reap(self.db)

    # -- wiring between the parts --------------------------------------------------

    def _handle(self) -> WorkerHandle:
        """The one place an extension's view of this worker is made. Built before the
        parts that take the extensions (heartbeater, runner, claimer): the operations
        that need them are bound late, through this worker's methods."""
        capacity = self.capacity
        return WorkerHandle(db=self.db, settings=self.settings, host=self.host,
                            recorder=self.recorder, stopping=self._stopping.is_set,
                            in_flight=lambda: capacity.in_flight, wake=self.wake,
                            reap=self.reap, execute=self.execute, watch=self._watch)

    def _watch(self, attempt: Attempt, until: threading.Event) -> None:
        # Polled often: a tick waits for this loop to end before it answers.
        self.heartbeater.run(lambda: [attempt], interval=self.settings.heartbeat_interval,
                             until=until, poll=0.05)

    def _crashed(self) -> None:
        self._stopping.set()
        self._force.set()

    def _supervise(self) -> None:
        if self._threads.crash:
            self._stopping.set()

    def _set_db_state(self, ok: bool) -> None:
        with self._db_lock:
            if ok != self._db_ok:
                logger.log(logging.INFO if ok else logging.WARNING,
                           "database %s", "reachable" if ok else "unreachable")
            self._db_ok = ok
        metrics.DB_UP.set(1 if ok else 0)

    def _time_out(self, attempt: Attempt) -> None:
        self.runner.time_out(attempt)

    def _recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        self.slots.recorded(attempt, outcome, status)

    def _outcomes_written(self) -> None:
        self.claimer.outcomes_written()

    def _heartbeat_loop(self) -> None:
        self.heartbeater.run(self.active, interval=self.settings.heartbeat_interval,
                             until=self._stopped, tracked=self.slots.tracked)

    def _heartbeat_all(self) -> None:
        self.heartbeater.beat(self.active(), tracked=self.slots.tracked)

    def _maintenance_loop(self) -> None:
        TaskLoop(self.periodic, stop=self._stopping, db_state=self._set_db_state).run()

    # -- shutdown ------------------------------------------------------------------

    def _shutdown(self, timeout: float | None = None) -> int:
        with self._shutdown_lock:
            if self._stopped.is_set():
                return EXIT_CRASHED if self._threads.crash else EXIT_OK
            return self._shutdown_locked(timeout)

    def _call_all(self, hook: str) -> None:
        for ext in self.extensions:
            try:
                getattr(ext, hook)()
            except Exception:
                logger.exception("%s of %s failed", hook, type(ext).__name__)

    def _shutdown_locked(self, timeout: float | None) -> int:
        grace = self.settings.shutdown_grace if timeout is None else timeout
        deadline = time.monotonic() + grace
        self._call_all("on_stopping")
        self.claimer.wake()
        self._threads.join("fetch", timeout=10)
        self.slots.release_unstarted()
        self.slots.end_threads()
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
        return EXIT_CRASHED if self._threads.crash else EXIT_OK


def _fit_heartbeat_bound(db: Database, settings: WorkerSettings) -> None:
    """Lower the heartbeat calls' bound so that one abandoned heartbeat leaves time
    for another inside the grace: interval + 2 x bound <= grace.

    A claim last heartbeated at T is beaten again at T + interval; if that call is
    abandoned at T + interval + bound, the next one goes out at once and must be
    answered before T + grace, when the claim may be reaped.
    """
    room = (settings.heartbeat_grace - settings.heartbeat_interval) / 2
    bound = db.bounds.heartbeat
    if bound > room:
        logger.debug("heartbeat calls bounded to %.2f s (the grace %.0f s leaves room for "
                     "a retry)", room, settings.heartbeat_grace)
        db.bounds = db.connections.bounds = dataclasses.replace(db.bounds, heartbeat=room)

