"""A filter over jobs, shared by search (``jobs list``), bulk actions and the console."""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Any

from jobwarden.structs.states import JobStatus


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobFilter:
    """Which jobs: every field narrows; an empty filter matches every job.

    ``text`` looks in the job's data (as JSON text) and its last error,
    ``error`` in the last error only; both case-insensitive substrings. The time
    range is on ``created_at`` (``created_from`` inclusive, ``created_to``
    exclusive).
    """

    statuses: tuple[JobStatus, ...] = ()
    queue: str | None = None
    #: An exact class path (``class_prefix`` matches the start of it).
    job_class: str | None = None
    class_prefix: str | None = None
    created_from: datetime.datetime | None = None
    created_to: datetime.datetime | None = None
    text: str | None = None
    error: str | None = None

    def params(self) -> dict[str, Any]:
        return {
            "statuses": [s.value for s in self.statuses] or None,
            "queue": self.queue or None,
            "job_class": self.job_class or None,
            "class_prefix": self.class_prefix or None,
            "created_from": self.created_from,
            "created_to": self.created_to,
            "text": self.text.lower() if self.text else None,
            "error": self.error.lower() if self.error else None,
        }

    def as_json(self) -> dict[str, Any]:
        out = self.params()
        for key in ("created_from", "created_to"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return {k: v for k, v in out.items() if v is not None}


#: What each bulk action may touch: a filter's statuses are intersected with these.
BULK_STATUSES: dict[str, tuple[JobStatus, ...]] = {
    "retry": (JobStatus.FAILED, JobStatus.INTERRUPTED, JobStatus.CANCELLED),
    "cancel": (JobStatus.PENDING, JobStatus.PROCESSING),
    "purge": (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.INTERRUPTED,
              JobStatus.CANCELLED),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BulkResult:
    action: str
    #: Rows changed (or, for a dry run, rows that would be).
    count: int
    dry_run: bool

    def as_json(self) -> dict[str, Any]:
        return {"action": self.action, "count": self.count, "dry_run": self.dry_run}


_AGO = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str, *, flag: str, now: datetime.datetime) -> datetime.datetime:
    """ISO 8601 (naive = UTC) or an age (``15m`` = fifteen minutes before ``now``)."""
    shown = repr(text) if len(text) <= 60 else f"{text[:60]!r}..."
    match = _AGO.match(text.strip())
    if match:
        try:
            return now - datetime.timedelta(
                seconds=float(match.group("n")) * _UNIT[match.group("unit")])
        except (OverflowError, ValueError):  # beyond year 1 (or timedelta's range)
            raise ValueError(f"{flag} {shown} reaches back before the year 1") from None
    try:
        value = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{flag} {shown} is neither ISO 8601 nor an age like 15m") from None
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
