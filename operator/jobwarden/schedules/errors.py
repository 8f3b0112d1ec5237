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
    """A schedule expression, interval, time zone or catch-up setting is invalid.

    ``field`` names the argument of ``validate`` at fault when known
    (``expression``, ``timezone``, ``catch_up``, ``queue``, ...) and ``detail``
    is the message without the schedule's name: the operator reports both
    against the resource's own field (``spec.timeZone: ...``).
    """

    def __init__(self, message: str, *, field: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.detail = message if detail is None else detail
