"""The worker's share of database upkeep: it offers to run the retention task.

Apart from :mod:`jobwarden.maintenance.retention` because the operator runs the same task
and must not import the worker's extension machinery (.importlinter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden.maintenance.retention import RetentionSettings, RetentionTask
from jobwarden.worker.extensions import Extension, PeriodicTask

if TYPE_CHECKING:
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["RetentionExtension"]


class RetentionExtension(Extension):
    """Offers the worker's maintenance thread the retention task (assembly step 5).

    The first pass comes one interval after start, so a short-lived worker (a
    test, ``jobwarden tick``) never takes the lease.
    """

    def __init__(self, worker: WorkerHandle, settings: RetentionSettings | None = None) -> None:
        self.settings = settings if settings is not None else RetentionSettings.from_env()
        self.task = RetentionTask(worker.db, self.settings, host=worker.host)

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return (self.task.task,) if self.settings.enabled else ()

    def on_stopped(self) -> None:
        self.task.release()
