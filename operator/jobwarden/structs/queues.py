"""Per-queue figures and pause state, as the CLI, the console and metrics read them."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueSummary:
    """One queue's depth, backlog age, running count, recent throughput and pause state."""

    queue: str
    pending: int
    #: Pending jobs whose run_at has come (the backlog workers could take now).
    due: int
    #: Seconds the oldest due pending job has waited (0 without a backlog).
    oldest_due_seconds: float
    running: int
    #: Finished in the last ``window_seconds``.
    completed: int
    failed: int
    window_seconds: float
    paused_at: datetime.datetime | None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def completed_per_minute(self) -> float:
        return self.completed * 60.0 / self.window_seconds if self.window_seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue, "pending": self.pending, "due": self.due,
            "oldest_due_seconds": self.oldest_due_seconds, "running": self.running,
            "completed": self.completed, "failed": self.failed,
            "window_seconds": self.window_seconds,
            "completed_per_minute": round(self.completed_per_minute, 3),
            "paused": self.paused,
            "paused_at": self.paused_at.isoformat() if self.paused_at else None,
        }
