"""Periodic work, run one way for the worker and the operator.

A worker's maintenance thread (reaper, host refresh and prune, schedules) and
each of the operator's loops (schedules, reaper, gauges, each under a database
lease) used to keep their own copy of "run this every N seconds, with jitter,
never throw". :class:`TaskLoop` is that one copy:

- each :class:`PeriodicTask` runs every ``interval`` seconds, counted from the
  end of its previous pass (a slow pass never makes passes run back to back),
  jittered by +-10 % so a fleet started together spreads out; the first pass
  comes within ``first_delay`` (default: a random moment in the first
  ``min(interval, 2)`` seconds);
- ``interval`` may change while the loop runs; 0 retires the task;
- a task may have a ``gate`` (a :class:`LoopLease`): a pass runs only when
  the gate says so, else ``standby`` runs (give up what only the holder does);
  a gate handles its own errors (one that raises counts as "no");
- a pass never throws: ``DatabaseUnavailable`` is reported through
  ``db_state(False)`` and logged as a warning, anything else is logged with its
  traceback; a successful pass reports ``db_state(True)`` when asked to;
- a loop's :class:`Progress` says how long its current pass has been running,
  which is what /healthz judges (a loop stuck in one pass is not alive, however
  alive its thread is).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobwarden import errors

if TYPE_CHECKING:
    from jobwarden.coordination import leases
    from jobwarden.db.database import Database

__all__ = ["LoopLease", "PeriodicTask", "Progress", "TaskLoop", "stalled"]

logger = logging.getLogger("jobwarden.looping")

#: The longest a loop sleeps before it looks at its tasks again (intervals may change).
TICK_SECONDS = 0.2
#: A task's ``next_in`` never brings its next pass closer than this to the previous one.
SOONEST_SECONDS = 0.5


class Progress:
    """When a loop's current round began (None between rounds), for liveness.

    Why "a round in progress too long" and not "no round completed lately": a
    loop that waits for work (the recorder with nothing to write, the heartbeat
    thread of an idle worker, which is not even started) is idle, not stuck; a
    loop stuck inside one round (a call that never returns, a lock never freed)
    is what a restart cures. A round that failed (``DatabaseUnavailable``) is a
    completed round: a database that is away is readiness's business (a restart
    does not bring it back). Written by the loop's own thread only, read by the
    HTTP thread: plain attribute stores, no lock.
    """

    __slots__ = ("name", "rounds", "since")

    def __init__(self, name: str) -> None:
        self.name = name
        #: Monotonic time the round in progress began; None between rounds.
        self.since: float | None = None
        #: Rounds completed (tests wait on it).
        self.rounds = 0

    def begin(self) -> None:
        self.since = time.monotonic()

    def end(self) -> None:
        self.since = None
        self.rounds += 1

    def running_for(self, now: float) -> float:
        """Seconds the current round has been running (0 between rounds)."""
        since = self.since
        return 0.0 if since is None else now - since


def stalled(progress: Sequence[Progress], bound: float) -> str | None:
    """Why the loops are not alive (a round running longer than ``bound``), or None."""
    now = time.monotonic()
    stuck = [(p.name, p.running_for(now)) for p in progress if p.running_for(now) > bound]
    if not stuck:
        return None
    return "stalled: " + ", ".join(f"{name} round running for {seconds:.0f} s"
                                   for name, seconds in stuck) + f" (bound {bound:g} s)"


@dataclasses.dataclass
class PeriodicTask:
    """Work to run every ``interval`` seconds (with jitter); see the module docstring."""

    name: str
    interval: float
    run: Callable[[], object]
    #: Runs the pass only when it returns True (it may raise like ``run``).
    gate: Callable[[], bool] | None = None
    #: Runs instead of the pass when the gate said no.
    standby: Callable[[], None] | None = None
    #: Seconds before the first pass (None: random within min(interval, 2)).
    first_delay: float | None = None
    #: Asked after each pass that ran (the gate said yes): seconds until the next pass is
    #: due, when that is sooner than ``interval`` (None: the interval). Never sooner than
    #: :data:`SOONEST_SECONDS` after the pass; an error counts as None.
    next_in: Callable[[], float | None] | None = None
    #: What ``next_in`` said after the last pass (None: nothing sooner).
    due_in: float | None = None
    #: Completed passes (the operator's tests and /healthz read it).
    passes: int = 0
    next_at: float = 0.0
    #: The pass in progress, if any (liveness; see :class:`Progress`).
    progress: Progress = dataclasses.field(default_factory=lambda: Progress("periodic"))

    def __post_init__(self) -> None:
        self.progress.name = self.name


def _asked(task: PeriodicTask) -> float | None:
    """What the task's ``next_in`` says after a pass (None: nothing, or it failed)."""
    if task.next_in is None:
        return None
    try:
        return task.next_in()
    except Exception as exc:  # the interval then, as before there was a hint
        logger.debug("periodic task %s: next_in failed: %s", task.name, exc)
        return None


def _next_wait(task: PeriodicTask) -> float:
    """Seconds from the end of a pass to the next: the jittered interval, or sooner when
    the pass said so (``next_in``), though never sooner than :data:`SOONEST_SECONDS`."""
    wait = task.interval * random.uniform(0.9, 1.1)
    if task.due_in is not None:
        wait = min(wait, max(task.due_in, SOONEST_SECONDS))
    return wait


class TaskLoop:
    """Runs tasks on the calling thread until ``stop`` is set."""

    def __init__(self, tasks: Sequence[PeriodicTask], *, stop: threading.Event,
                 db_state: Callable[[bool], None] | None = None,
                 report_success: bool = False) -> None:
        self.tasks = list(tasks)
        self._stop = stop
        self._db_state = db_state
        self._report_success = report_success

    def run(self) -> None:
        start = time.monotonic()
        for task in self.tasks:
            first = task.first_delay if task.first_delay is not None else random.uniform(
                0, min(task.interval, 2.0))
            task.next_at = start + first
        while not self._stop.is_set():
            now = time.monotonic()
            for task in self.tasks:
                if task.interval > 0 and now >= task.next_at and not self._stop.is_set():
                    self.run_once(task)
                    task.next_at = time.monotonic() + _next_wait(task)
            due = [t.next_at for t in self.tasks if t.interval > 0]
            wait = min(due) - time.monotonic() if due else TICK_SECONDS
            self._stop.wait(min(max(wait, 0.0), TICK_SECONDS))

    def run_once(self, task: PeriodicTask) -> None:
        """One pass of ``task`` (through its gate); never raises."""
        task.progress.begin()
        try:
            self._run_once(task)
        finally:
            task.progress.end()

    def _run_once(self, task: PeriodicTask) -> None:
        try:
            if task.gate is not None and not task.gate():
                if task.standby is not None:
                    task.standby()
                return
        except Exception:
            logger.exception("periodic task %s: its gate failed", task.name)
            return
        task.due_in = None
        try:
            task.run()
            task.due_in = _asked(task)
            if self._report_success and self._db_state is not None:
                self._db_state(True)
        except errors.DatabaseUnavailable as exc:
            if self._db_state is not None:
                self._db_state(False)
            logger.warning("%s: database unavailable: %s", task.name, exc)
        except Exception:
            logger.exception("periodic task %s failed (it will run again)", task.name)
        task.passes += 1


class LoopLease:
    """The database lease one process tries to hold for one periodic loop.

    ``hold()`` renews the lease when held, else tries to take it; a holder that
    finds its lease taken over logs it and competes again like anyone else.
    """

    def __init__(self, db: Database, *, name: str, owner: str, host: str, ttl: float) -> None:
        self._db = db
        self.name = name
        self._owner = owner
        self._host = host
        self._ttl = ttl
        self._holder: leases.LeaseHolder | None = None

    @property
    def token(self) -> int | None:
        return self._holder.token if self._holder is not None else None

    @property
    def held(self) -> bool:
        return self._holder is not None

    def hold(self) -> bool:
        """Renew the lease if held, else try to take it; True when this process holds it."""
        if self._holder is not None:
            if self._holder.extend():
                return True
            logger.warning("lost lease %s (token %d): another process took over", self.name,
                           self._holder.token)
            self._holder = None
        sent = time.monotonic()
        found = self._db.leases.try_acquire(name=self.name, owner=self._owner,
                                            ttl_seconds=self._ttl, host=self._host)
        if found.acquired:
            # The lock API loads in the process that wins the lease, not in every
            # worker that offers to run the loop (docs/benchmarks.md, "Idle worker RSS").
            from jobwarden.coordination import leases
            self._holder = leases.LeaseHolder(self._db, found, owner=self._owner,
                                              ttl=self._ttl, kind="lock", requested_at=sent,
                                              counted=False)
            logger.info("holding lease %s (token %s): this process runs the loop", self.name,
                        found.token)
            return True
        return False

    def forget(self) -> None:
        """The lease table is out of reach: stop counting on the lease (it may lapse)."""
        self._holder = None

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        try:
            holder.release(retry_seconds=0)
        except errors.JobwardenError as exc:
            logger.warning("could not release lease %s (it will lapse): %s", self.name, exc)
