"""The worker's side of :mod:`jobwarden.maintenance.gauges`: compete for its lease, export if held.

Apart from :mod:`jobwarden.maintenance.gauges` so the operator, which exports the same
gauges under the same lease, imports nothing of the worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden.maintenance.gauges import GaugeExporter, PeriodOf
from jobwarden.maintenance.looping import PeriodicTask
from jobwarden.worker.extensions import Extension

if TYPE_CHECKING:
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["GaugeExtension"]


class GaugeExtension(Extension):
    """A worker that serves ``/metrics`` competes for the gauge lease (maintenance thread).

    Only a worker with an HTTP port gets this extension: a holder nobody scrapes
    would hide the gauges from everyone. The lease's owner is unique per worker
    object, so two workers in one process are two competitors.
    """

    def __init__(self, worker: WorkerHandle, *, period_of: PeriodOf | None = None) -> None:
        self.exporter = GaugeExporter(
            worker.db, owner=f"worker:{worker.host}:{uuid.uuid4().hex[:8]}",
            host=worker.host, interval=worker.settings.gauge_interval, period_of=period_of)

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return (self.exporter.task,)

    def on_stopping(self) -> None:
        self.exporter.stop()

    def on_stopped(self) -> None:
        self.exporter.stop()
