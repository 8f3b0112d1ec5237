"""Schedules inside a worker: code-schedule sync, periodic runner passes, the tick's pass.

The worker side of :mod:`jobwarden.schedules.runner`: a
:class:`ScheduleService` syncs the app's code-defined schedules once (retried
until the database answers) and then runs passes at most every
``schedule_check_seconds``; :class:`ScheduleExtension` gives the worker that
work as a periodic task and gives a tick the same pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.schedules import planning, registry, runner
from jobwarden.schedules.store import Schedules
from jobwarden.structs.schedules import RunReport
from jobwarden.worker.extensions import Extension, PeriodicTask

if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.worker.worker import Worker

__all__ = ["ScheduleExtension", "ScheduleService"]

logger = logging.getLogger("jobwarden.schedules")


class ScheduleService:
    """What a worker process runs periodically: code-schedule sync once, then passes.

    The sync is retried until it succeeds (the database may be down when the worker
    starts). Passes run at most every ``check_seconds``; a pass that hits its limit
    is repeated at once, within a time budget of one check period, so a backlog of
    many due schedules drains without waiting for the next period.
    """

    def __init__(self, db: Database, *, check_seconds: float, modules: Sequence[str] = (),
                 limit: int = 1000) -> None:
        self.db = db
        self.check_seconds = check_seconds
        self.modules = tuple(modules)
        self.limit = limit
        self.synced = False
        self.last_report: RunReport | None = None
        self.tolerance_seconds = max(planning.DEFAULT_TOLERANCE_SECONDS,
                                     int(2 * check_seconds) + 5)

    def sync(self) -> None:
        try:
            registry.sync(Schedules(self.db))
            self.synced = True
        except errors.SchemaMissing as exc:
            runner.warn_once("code-defined schedules not synced until the schema is "
                             f"migrated: {exc}")
        except errors.DatabaseUnavailable as exc:
            logger.warning("code-defined schedules not synced yet: %s", exc)
        except Exception:
            logger.exception("code-defined schedules not synced")

    def run_once(self) -> RunReport:
        if not self.synced:
            self.sync()
        total = RunReport()
        if self.check_seconds <= 0:
            return total
        deadline = time.monotonic() + max(self.check_seconds, 1.0)
        while True:
            report = runner.enqueue_due(self.db, limit=self.limit,
                                 tolerance_seconds=self.tolerance_seconds)
            total.add(report)
            if not report.more or report.errors or time.monotonic() >= deadline:
                break
        self.last_report = total
        changed = total.enqueued or total.skipped or total.missed or total.errors
        logger.log(logging.INFO if changed else logging.DEBUG,
                   "schedules: checked=%d enqueued=%d duplicates=%d skipped=%d missed=%d "
                   "errors=%d", total.checked, total.enqueued, total.duplicates, total.skipped,
                   total.missed, total.errors)
        return total


class ScheduleExtension(Extension):
    """Schedules inside a worker: one periodic task, and the pass a tick runs.

    ``schedule_check_seconds = 0`` turns the runner off in this process; code
    schedules are still synced (once), so other runners (the operator) see them,
    and the task retires itself (interval 0) once the sync succeeded.
    """

    def __init__(self, worker: Worker) -> None:
        self.check_seconds = worker.settings.schedule_check_seconds
        self.service = ScheduleService(worker.db, check_seconds=self.check_seconds,
                                       modules=worker.settings.apps)
        self.task = PeriodicTask(name="schedules",
                                 interval=self.check_seconds if self.check_seconds > 0 else 5.0,
                                 run=self._run)

    def _run(self) -> None:
        self.service.run_once()
        if self.check_seconds <= 0 and self.service.synced:
            self.task.interval = 0  # sync done and the runner is off: nothing left to do

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return (self.task,)

    def tick_pass(self) -> int | None:
        """One pass for a tick: the number of slots enqueued (None: the runner is off)."""
        if self.check_seconds <= 0:
            return None
        return runner.enqueue_due(self.service.db,
                           tolerance_seconds=self.service.tolerance_seconds).enqueued
