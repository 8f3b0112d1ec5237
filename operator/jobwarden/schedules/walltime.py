"""Turn local wall-clock times into instants under one DST rule for every schedule.

A cron expression describes wall-clock times ("02:30 every day in Berlin"),
but a slot must be an instant, the same on every server, because the slot's
UTC timestamp is the job's unique key. Two kinds of wall time have no single
instant:

* a time in a DST *gap* (02:30 on the spring-forward day) does not exist; it
  maps to the next valid instant, the moment the clocks jump (03:00 local),
  so the job still runs that day, as soon as it can;
* a time in a DST *overlap* (02:30 on the fall-back day) exists twice; it maps
  to the first occurrence only, so the job runs once.

cronsim implements Debian cron's variant of this, which applies only to
expressions whose minute and hour fields do not start with ``*``; every
other expression is stepped in real time, so ``*/15 * * * *`` runs in both
copies of the repeated hour and ``0 */1 * * *`` and ``0 * * * *`` differ. We
feed cronsim naive wall times (no DST handling at all) and apply the rule
here, so one rule holds for every expression and is tested in one place.

Mapping wall times in ascending order gives instants in non-decreasing order
(several gap times share one instant: callers drop the repeats), which is why
forward and reverse iteration over wall times stay correct.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from jobwarden import textrules
from jobwarden.schedules import errors

__all__ = ["UTC", "load_zone", "overlap_extent", "to_instant", "to_wall"]

UTC = dt.UTC


def load_zone(name: str) -> dt.tzinfo:
    """Return the IANA zone called ``name`` or raise ScheduleError."""
    if name in ("UTC", "Etc/UTC"):
        return UTC
    if not name or name != name.strip():
        raise errors.ScheduleError(f"time zone {textrules.echo(name)} is not an IANA zone name")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # OSError: a name too long to be a file name is not a zone either.
        raise errors.ScheduleError(
            f"unknown time zone {textrules.echo(name)}: use an IANA name such as 'Europe/Berlin', "
            "'America/New_York' or 'UTC'"
        ) from exc


def to_wall(instant: dt.datetime, zone: dt.tzinfo) -> tuple[dt.datetime, dt.timedelta]:
    """Return the naive local wall time of ``instant`` (whole seconds, floored).

    The second value is how far past that wall time the *first* occurrence
    lies when ``instant`` is in the second pass of a DST overlap: wall times up
    to that much later already had their (first) occurrence before ``instant``.
    """
    local = instant.astimezone(zone)
    wall = local.replace(tzinfo=None, microsecond=0)
    return wall, overlap_extent(local) if local.fold else dt.timedelta(0)


def overlap_extent(local: dt.datetime) -> dt.timedelta:
    """Length of the DST overlap containing the aware local time ``local``."""
    first = local.replace(fold=0).utcoffset()
    second = local.replace(fold=1).utcoffset()
    assert first is not None and second is not None
    return max(first - second, dt.timedelta(0))


def to_instant(wall: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """Map a naive wall time to its slot instant in UTC (gap -> jump, overlap -> first)."""
    if zone is UTC:
        return wall.replace(tzinfo=UTC)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    return _gap_end(wall, zone)


def _gap_end(wall: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """The instant the clocks jump over the gap containing ``wall`` (bisected to the second).

    For a non-existent wall time, fold=0 and fold=1 read it with the offsets
    before and after the jump; the jump lies between those two readings.
    """
    before = wall.replace(tzinfo=zone, fold=0)
    after = wall.replace(tzinfo=zone, fold=1)
    low = after.astimezone(UTC)  # read with the later (larger) offset: before the jump
    high = before.astimezone(UTC)  # read with the earlier offset: after the jump
    if high < low:
        low, high = high, low
    offset_after = after.utcoffset()
    # Invariant: low is before the jump (old offset), high is at or after it.
    while high - low > dt.timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(zone).utcoffset() == offset_after:
            high = middle
        else:
            low = middle
    return high
