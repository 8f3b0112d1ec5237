"""The overview's charts: jobs finished per minute, drawn as server-rendered SVG.

Why SVG from the server: the console's Content-Security-Policy allows no inline
script or style, and a chart library would be a second vendored script to keep
current. An ``<svg>`` of ``<rect>`` bars with presentation attributes needs
neither, works without JavaScript, and is swapped in by the same htmx refresh
as the rest of the overview.

Why a kept history: the figures come from ``jobs.finished_at`` (one range over
``jobs_finished_idx``), whose cost is the rows finished in the range. A minute
that ended more than ``SETTLE_SECONDS`` ago does not change any more (a
completion's ``finished_at`` is its own transaction's time), so each console
process keeps those minutes and asks the database only for the newer ones: a
refresh reads the last couple of minutes of finished jobs, not the last hour.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobwarden.db.database import Database

MINUTE = datetime.timedelta(minutes=1)
#: Minutes shown (the current one included).
WINDOW_MINUTES = 60
#: A minute this long over is final: kept, never asked for again.
SETTLE_SECONDS = 120.0


@dataclasses.dataclass(frozen=True)
class MinuteCount:
    minute: datetime.datetime
    completed: int
    failed: int


class FinishedHistory:
    """Jobs finished per minute over the last ``minutes``, settled minutes kept."""

    def __init__(self, minutes: int = WINDOW_MINUTES, settle_seconds: float = SETTLE_SECONDS
                 ) -> None:
        self.minutes = minutes
        self.settle = datetime.timedelta(seconds=settle_seconds)
        self._settled: dict[datetime.datetime, MinuteCount] = {}
        self._lock = threading.Lock()

    def series(self, db: Database, now: datetime.datetime) -> list[MinuteCount]:
        """One entry per minute up to ``now`` (the database's clock), oldest first, the
        current (partial) minute last."""
        current = now.replace(second=0, microsecond=0)
        first = current - (self.minutes - 1) * MINUTE
        final_before = (now - self.settle).replace(second=0, microsecond=0)
        minutes = [first + n * MINUTE for n in range(self.minutes)]
        with self._lock:
            for old in [m for m in self._settled if m < first]:
                del self._settled[old]
            since = next((m for m in minutes if m not in self._settled), current)
        fresh = {minute: MinuteCount(minute, done, failed)
                 for minute, done, failed in db.queues.finished_per_minute(since)}
        with self._lock:
            for minute in minutes:
                if since <= minute < final_before:
                    self._settled[minute] = fresh.get(minute, MinuteCount(minute, 0, 0))
            known = dict(self._settled)
        return [fresh.get(m) or known.get(m) or MinuteCount(m, 0, 0) for m in minutes]


@dataclasses.dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    label: str


@dataclasses.dataclass(frozen=True)
class BarChart:
    """Geometry for the template: bars in a ``width`` x ``height`` viewBox."""

    title: str
    kind: str
    bars: list[Bar]
    peak: int
    total: int
    width: int
    height: int
    first_label: str
    last_label: str


def bar_chart(title: str, kind: str, points: Sequence[tuple[datetime.datetime, int]], *,
              width: int = 600, height: int = 90) -> BarChart:
    """Bars scaled to the highest value (a zero chart stays flat, never divides by 0)."""
    peak = max((value for _, value in points), default=0)
    slot = width / max(len(points), 1)
    bars = []
    for n, (minute, value) in enumerate(points):
        tall = height * value / peak if peak else 0.0
        bars.append(Bar(x=round(n * slot + 0.5, 2), y=round(height - tall, 2),
                        width=round(max(slot - 1.0, 0.5), 2), height=round(tall, 2),
                        value=value,
                        label=f"{minute.astimezone(datetime.UTC):%H:%M} UTC: {value}"))
    return BarChart(title=title, kind=kind, bars=bars, peak=peak,
                    total=sum(value for _, value in points), width=width, height=height,
                    first_label=_clock(points[0][0]) if points else "",
                    last_label=_clock(points[-1][0]) if points else "")


def _clock(minute: datetime.datetime) -> str:
    return f"{minute.astimezone(datetime.UTC):%H:%M}"


def overview_charts(series: Sequence[MinuteCount]) -> list[BarChart]:
    return [
        bar_chart("Completed per minute", "completed",
                  [(m.minute, m.completed) for m in series]),
        bar_chart("Failed per minute (failed or interrupted)", "failed",
                  [(m.minute, m.failed) for m in series]),
    ]
