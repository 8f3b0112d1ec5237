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

import importlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from jobwarden import definitions, metrics, reaper
from jobwarden.db.database import Database
from jobwarden.looping import TaskLoop
from jobwarden.settings import WorkerSettings
from jobwarden.structs.states import JobStatus
from jobwarden.worker import execution
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.claiming import Claimer
from jobwarden.worker.context import Attempt, Outcome
from jobwarden.worker.extensions import PeriodicTask, WorkerExtension
from jobwarden.worker.heartbeats import Heartbeater
from jobwarden.worker.outcomes import FailureEvent, Outcomes, backoff
from jobwarden.worker.recorder import Recorder
from jobwarden.worker.running import AttemptRunner
from jobwarden.worker.slots import Slots
from jobwarden.worker.threads import Threads

if TYPE_CHECKING:
    from jobwarden.health import HealthServer

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
        self._stopping = threading.Event()
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
        self.extensions: tuple[WorkerExtension, ...] = tuple(
            factory(self) for factory in extensions)
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
            PeriodicTask(name="reaper", interval=settings.reap_interval, run=self.reap),
            *(task for ext in self.extensions for task in ext.periodic_tasks()),
        ]
        self.http: HealthServer | None = None
        if settings.http_port is not None:
            from jobwarden.health import HealthServer

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
        crash = self._threads.crash
        return (False, f"crashed: {crash}") if crash else (True, "alive")

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

    def reap(self) -> int:
        # Refresh this process's own claims first: after an outage longer than the
        # grace (database down, process paused) they look stale, but they are alive
        # here, and reaping them would run their jobs twice.
        self._heartbeat_all()
        return reaper.reap(self.db)

    # -- wiring between the parts --------------------------------------------------

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


#: Builds one extension for a worker (called once, from ``Worker.__init__``).
ExtensionFactory = Callable[[Worker], WorkerExtension]
