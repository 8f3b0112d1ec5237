"""A schedule's period in seconds: what "no success for N periods" is measured in.

Why the longest gap among the next slots and not the next one: the gaps of many
cron expressions differ (``@monthly``: 28-31 days; weekdays at 9: one day, then
three over the weekend). An alert that allows N periods of the *shortest* gap
pages every weekend for a healthy weekday schedule; with the longest of the next
:data:`GAPS` gaps it waits N of the schedule's longest normal silences.
``jobwarden_schedule_period_seconds`` (exported by the gauge lease holder,
:mod:`jobwarden.maintenance.gauges`) is this value; JobwardenScheduleNoSuccess compares the
time without a success with it (docs/alerts.md).
"""

from __future__ import annotations

import datetime as dt
import functools

from jobwarden.schedules import errors, expressions

__all__ = ["GAPS", "period_seconds"]

#: Consecutive gaps looked at: a year of a monthly schedule, two weeks of a daily one.
GAPS = 14


@functools.lru_cache(maxsize=1024)
def _period(expression: str, day: dt.date) -> float | None:
    try:
        expr = expressions.parse_stored(expression)
    except errors.ScheduleError:
        return None
    at = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    slot = expr.next_after(at)
    longest = 0.0
    for _ in range(GAPS):
        following = expr.next_after(slot)
        longest = max(longest, (following - slot).total_seconds())
        slot = following
    return longest or None


def period_seconds(expression: str, *, now: dt.datetime | None = None) -> float | None:
    """The longest of the next :data:`GAPS` gaps between slots of a stored expression
    (:meth:`Expression.canonical`), from the start of ``now``'s day (cached per day);
    None when it cannot be parsed (it was stored by a newer release)."""
    day = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).date()
    return _period(expression, day)
