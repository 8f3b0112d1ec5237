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
- a task may have a ``gate`` (the operator's loop lease): a pass runs only when
  the gate says so, else ``standby`` runs (give up what only the holder does);
  a gate handles its own errors (one that raises counts as "no");
- a pass never throws: ``DatabaseUnavailable`` is reported through
  ``db_state(False)`` and logged as a warning, anything else is logged with its
  traceback; a successful pass reports ``db_state(True)`` when asked to.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from jobwarden import errors

__all__ = ["PeriodicTask", "TaskLoop"]

logger = logging.getLogger("jobwarden.looping")

#: The longest a loop sleeps before it looks at its tasks again (intervals may change).
TICK_SECONDS = 0.2


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
    #: Completed passes (the operator's tests and /healthz read it).
    passes: int = 0
    next_at: float = 0.0


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
                    task.next_at = time.monotonic() + task.interval * random.uniform(0.9, 1.1)
            due = [t.next_at for t in self.tasks if t.interval > 0]
            wait = min(due) - time.monotonic() if due else TICK_SECONDS
            self._stop.wait(min(max(wait, 0.0), TICK_SECONDS))

    def run_once(self, task: PeriodicTask) -> None:
        """One pass of ``task`` (through its gate); never raises."""
        try:
            if task.gate is not None and not task.gate():
                if task.standby is not None:
                    task.standby()
                return
        except Exception:
            logger.exception("periodic task %s: its gate failed", task.name)
            return
        try:
            task.run()
            if self._report_success and self._db_state is not None:
                self._db_state(True)
        except errors.DatabaseUnavailable as exc:
            if self._db_state is not None:
                self._db_state(False)
            logger.warning("%s: database unavailable: %s", task.name, exc)
        except Exception:
            logger.exception("periodic task %s failed (it will run again)", task.name)
        task.passes += 1
