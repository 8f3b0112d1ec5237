"""The live terminal view shared by ``jobwarden dev`` and ``jobwarden top``.

One place renders it, so ``top`` against a production database shows exactly
what ``dev`` shows locally. Every figure comes from the per-queue summary
(``Client.queues``: partial indexes and the last minute of finished jobs) and
one short page of running jobs, never from a count over the whole jobs table,
so refreshing it every second is cheap on a table of millions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from jobwarden.api.client import Client

#: Throughput and outcomes are counted over this window.
WINDOW_SECONDS = 60.0


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


class LiveView:
    """Samples the database and renders one frame of the view per call."""

    def __init__(self, client: Client, *, title: str, footer: Sequence[str] = ()) -> None:
        self.client = client
        self.title = title
        self.footer = list(footer)
        self.started = time.monotonic()

    def frame(self) -> str:
        """A fresh frame. Line 0 is the headline and line 2 the outcomes (one-line mode)."""
        queues = self.client.queues(window_seconds=WINDOW_SECONDS)
        running = self.client.running(limit=8)
        completed = sum(q.completed for q in queues)
        failed = sum(q.failed for q in queues)
        rate = completed / WINDOW_SECONDS
        lines = [
            f"{self.title} - {time.monotonic() - self.started:6.0f}s - {rate:7.1f} jobs/s "
            f"completed (last {WINDOW_SECONDS:.0f}s)",
            "",
            f"outcomes: completed={completed}  failed={failed} (last {WINDOW_SECONDS:.0f}s)  "
            f"pending={sum(q.pending for q in queues)}  due={sum(q.due for q in queues)}  "
            f"running={sum(q.running for q in queues)}",
            "",
            f"{'queue':<16} {'state':>7} {'pending':>9} {'due':>9} {'oldest':>7} "
            f"{'running':>8} {'done/min':>9} {'fail/min':>9}",
        ]
        per_minute = 60.0 / WINDOW_SECONDS
        for q in queues:
            lines.append(
                f"{q.queue[:16]:<16} {'paused' if q.paused else 'active':>7} {q.pending:>9} "
                f"{q.due:>9} {(_age(q.oldest_due_seconds) if q.due else '-'):>7} "
                f"{q.running:>8} {q.completed * per_minute:>9.0f} {q.failed * per_minute:>9.0f}")
        lines += ["", f"running ({sum(q.running for q in queues)}):"]
        for job in running:
            lines.append(f"  #{job.id:<8} {job.job_class[:36]:<36} attempt {job.attempts} on "
                         f"{job.claimed_by}")
        if self.footer:
            lines += ["", *self.footer]
        return "\n".join(lines)
