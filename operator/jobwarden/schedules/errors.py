"""The one exception a schedule definition can raise.

It subclasses ``ValueError`` because every cause is a bad value supplied by a
user (a ``JobSchedule`` manifest, a ``client.schedules.upsert`` call, a CLI
flag): callers that validate input generically still catch it, and callers
that want to report "your schedule is wrong" can catch exactly this. Messages
name the field or token at fault and, where there is one, the fix.
"""

from __future__ import annotations

__all__ = ["ScheduleError"]


class ScheduleError(ValueError):
    """A schedule expression, interval, time zone or catch-up setting is invalid."""
