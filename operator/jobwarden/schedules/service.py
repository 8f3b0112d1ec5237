"""Schedules inside a worker: code-schedule sync, periodic runner passes, the tick's pass.

The worker side of :mod:`jobwarden.schedules.runner`: a
:class:`ScheduleService` syncs the app's code-defined schedules once (retried
until the database answers) and then runs passes at most every
``schedule_check_seconds``; :class:`ScheduleExtension` gives the worker that
work as a periodic task and gives a tick the same pass.

A worker with nothing to do for schedules loads none of them: until it has
loaded the runner, each pass asks the database first (``schedule_worker_check``,
one statement) whether any schedule is due and whether any active code-defined
schedule exists, and only then imports the runner (with the planner, the cron
parser and the structs) or the code-schedule sync (with the store and its
validation). An application
that defines no schedule, in a database without due ones, keeps about 0.6 MiB
less resident (docs/benchmarks.md, "Idle worker RSS"); the pass that finds
nothing still counts as a runner pass (``jobwarden_schedule_runs_total``).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.observability import metrics
from jobwarden.worker.extensions import Extension, PeriodicTask

if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.structs.schedules import RunReport
    from jobwarden.worker.handle import WorkerHandle

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

    @functools.cached_property
    def tolerance_seconds(self) -> int:
        from jobwarden.schedules import planning

        return max(planning.DEFAULT_TOLERANCE_SECONDS, int(2 * self.check_seconds) + 5)

    def sync(self) -> None:
        from jobwarden.schedules import registry, runner
        from jobwarden.schedules.store import Schedules

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

    def _check(self) -> tuple[bool, bool]:
        """(a schedule may be due, a code schedule may need syncing); True when unsure."""
        try:
            row = self.db.row("schedule_worker_check", {"sync": not self.synced})
        except Exception:  # the runner or the sync reports it, as it always did
            return True, True
        assert row is not None
        # A code schedule is defined through the registry: not imported, none defined.
        registry = sys.modules.get("jobwarden.schedules.registry")
        defined = registry is not None and bool(registry.defined())
        return bool(row[0]), bool(row[1]) or defined

    def run_once(self) -> RunReport | None:
        """One pass; None when the database said nothing was due (nothing loaded)."""
        if self.synced and "jobwarden.schedules.runner" in sys.modules:
            # Loaded already: nothing left to save, and the runner's own claim answers
            # "is anything due" (a check first would be a second round trip per pass).
            due, code = True, False
        else:
            due, code = self._check()
        if not self.synced:
            if code:
                self.sync()
            else:
                self.synced = True  # nothing defined here, no code row to suspend
        if self.check_seconds <= 0:
            return None
        if not due:
            metrics.SCHEDULE_RUNS.labels("ok").inc()  # a pass, as the runner counts one
            logger.debug("schedules: none due")
            return None
        from jobwarden.schedules import runner
        from jobwarden.structs.schedules import RunReport

        total = RunReport()
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

    def __init__(self, worker: WorkerHandle) -> None:
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
        from jobwarden.schedules import runner

        return runner.enqueue_due(self.service.db,
                           tolerance_seconds=self.service.tolerance_seconds).enqueued
