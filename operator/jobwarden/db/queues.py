"""Operations on queues: pause, resume and per-queue figures (queues.sql)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from jobwarden.db.basics import channel_name
from jobwarden.structs.queues import QueueSummary

if TYPE_CHECKING:
    from jobwarden.db.database import Database


class QueuesTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def pause(self, queue: str, *, by: str | None = None) -> None:
        """Stop claims from ``queue`` (idempotent); running jobs finish normally."""
        self._db.row("queue_pause", {"queue": queue, "by": by})

    def resume(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again; False when it was not paused."""
        return self._db.row("queue_resume", {
            "queue": queue, "channel": channel_name(self._db.schema, "jobs")}) is not None

    def paused(self) -> set[str]:
        return {r[0] for r in self._db.rows("queue_paused_list")}

    def finished_per_minute(self, since: datetime.datetime
                            ) -> list[tuple[datetime.datetime, int, int]]:
        """(minute, completed, failed or interrupted) for each minute from ``since`` on
        in which a job finished (minutes without any are absent)."""
        return [(minute, int(done), int(failed)) for minute, done, failed in self._db.rows(
            "jobs_finished_per_minute", {"since": since})]

    def summaries(self, *, window_seconds: float = 300.0) -> list[QueueSummary]:
        """Every queue with pending, running or recently finished jobs, or paused."""
        return [
            QueueSummary(queue=q, pending=p, due=d, oldest_due_seconds=float(age or 0.0),
                         running=r, completed=c, failed=f, window_seconds=window_seconds,
                         paused_at=paused_at)
            for q, p, d, age, r, c, f, paused_at in self._db.rows(
                "queue_list", {"window": window_seconds})
        ]
