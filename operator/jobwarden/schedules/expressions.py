"""Schedule expressions: which instants are slots, computed without any I/O.

A *slot* is an instant at which a schedule is due; the runner turns each slot
into at most one job, keyed ``<schedule name>:<slot UTC ISO 8601>``. Every
server and every cluster must therefore compute bit-identical slots from the
same stored expression, whatever its local clock or time zone: slots are pure
functions of (expression, time zone) and are always returned as aware UTC
datetimes with whole seconds.

Two kinds:

* :class:`CronExpression`: standard 5-field cron evaluated by `cronsim` on
  local wall-clock time in an IANA zone, with the DST rule of
  :mod:`jobwarden.schedules.walltime` (gap -> the jump, overlap -> first).
* :class:`IntervalExpression`: every N seconds, aligned to the Unix epoch
  (slots are the instants t with t % N == 0), so the slots do not depend on
  when the schedule was created or which server looked first. Intervals
  ignore DST by construction and are what to use for "every 15 minutes,
  really".

The stored form (:meth:`Expression.canonical`, read back by
:func:`parse_stored`) reuses spellings Kubernetes users know from robfig/cron:
``CRON_TZ=Europe/Berlin 30 2 * * *`` and ``@every 1h30m``.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import re
from collections.abc import Iterator

import cronsim

from jobwarden.schedules import cronsyntax, errors, walltime

__all__ = [
    "CronExpression",
    "Expression",
    "IntervalExpression",
    "format_interval",
    "parse",
    "parse_interval",
    "parse_stored",
]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SECOND = dt.timedelta(seconds=1)
_MICROSECOND = dt.timedelta(microseconds=1)
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_INTERVAL = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
#: Longest accepted interval; longer periods are calendar questions, i.e. cron.
MAX_INTERVAL_SECONDS = 366 * 86_400
_CRON_TZ = "CRON_TZ="
_EVERY = "@every "


class Expression(abc.ABC):
    """When a schedule is due. Every datetime in and out is timezone-aware; out is UTC."""

    @abc.abstractmethod
    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first slot strictly after ``t``."""

    @abc.abstractmethod
    def prev_at_or_before(self, t: dt.datetime) -> dt.datetime | None:
        """The latest slot at or before ``t`` (None if there is none): the catch-up candidate."""

    @abc.abstractmethod
    def iter_before(self, t: dt.datetime) -> Iterator[dt.datetime]:
        """Slots at or before ``t``, newest first; lazy so callers can stop early."""

    @abc.abstractmethod
    def slots_between(
        self, start: dt.datetime, end: dt.datetime, *, limit: int | None = None
    ) -> list[dt.datetime]:
        """Slots ``s`` with ``start < s <= end``, ascending; at most ``limit`` (the earliest)."""

    @abc.abstractmethod
    def canonical(self) -> str:
        """The one stored spelling; :func:`parse_stored` reads it back to an equal expression."""

    @abc.abstractmethod
    def describe(self) -> str:
        """A short English sentence for people (CLI, status fields); not for parsing."""

    def matches(self, t: dt.datetime) -> bool:
        """Whether ``t`` is exactly a slot."""
        return self.prev_at_or_before(t) == _utc(t)


@dataclasses.dataclass(frozen=True)
class IntervalExpression(Expression):
    """Every ``seconds`` seconds, on the instants that are multiples of it since the epoch."""

    seconds: int

    def __post_init__(self) -> None:
        if not 0 < self.seconds <= MAX_INTERVAL_SECONDS:
            raise errors.ScheduleError(
                f"interval must be between 1s and {MAX_INTERVAL_SECONDS // 86_400}d, "
                f"got {self.seconds}s"
            )

    @property
    def timezone(self) -> str:
        return "UTC"

    def _index(self, t: dt.datetime) -> int:
        """Index of the latest slot at or before ``t`` (exact integer arithmetic)."""
        return ((_utc(t) - _EPOCH) // _MICROSECOND) // (self.seconds * 1_000_000)

    def _slot(self, index: int) -> dt.datetime:
        return _EPOCH + dt.timedelta(seconds=index * self.seconds)

    def next_after(self, t: dt.datetime) -> dt.datetime:
        return self._slot(self._index(t) + 1)

    def prev_at_or_before(self, t: dt.datetime) -> dt.datetime | None:
        return self._slot(self._index(t))

    def iter_before(self, t: dt.datetime) -> Iterator[dt.datetime]:
        index = self._index(t)
        while True:
            yield self._slot(index)
            index -= 1

    def count_between(self, start: dt.datetime, end: dt.datetime) -> int:
        """Number of slots in ``(start, end]`` without listing them."""
        return max(self._index(end) - self._index(start), 0)

    def slots_between(
        self, start: dt.datetime, end: dt.datetime, *, limit: int | None = None
    ) -> list[dt.datetime]:
        first, last = self._index(start) + 1, self._index(end)
        if limit is not None:
            last = min(last, first + max(limit, 0) - 1)
        return [self._slot(index) for index in range(first, last + 1)]

    def canonical(self) -> str:
        return _EVERY + format_interval(self.seconds)

    def describe(self) -> str:
        return f"every {format_interval(self.seconds)} (aligned to the Unix epoch, UTC)"


@dataclasses.dataclass(frozen=True)
class CronExpression(Expression):
    """A normalised 5-field cron expression (or macro) evaluated in an IANA zone."""

    cron: str
    timezone: str = "UTC"
    _zone: dt.tzinfo = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        normalised = cronsyntax.normalise(self.cron)
        object.__setattr__(self, "cron", normalised)
        object.__setattr__(self, "_zone", walltime.load_zone(self.timezone))
        try:
            probe = cronsim.CronSim(self._fields, dt.datetime(2000, 1, 1))
        except cronsim.CronSimError as exc:
            raise errors.ScheduleError(_explain_cronsim(normalised, str(exc))) from exc
        try:
            next(probe)
        except StopIteration:
            raise errors.ScheduleError(
                f"cron expression {normalised!r} never matches a date"
            ) from None

    @property
    def _fields(self) -> str:
        return cronsyntax.MACROS.get(self.cron, self.cron)

    def _walls(self, start: dt.datetime, *, reverse: bool) -> Iterator[dt.datetime]:
        """Matching naive wall times after (or, reversed, before) the naive ``start``."""
        walls = cronsim.CronSim(self._fields, start, reverse=reverse)
        while True:
            try:
                yield next(walls)
            except (StopIteration, OverflowError):
                # cronsim gives up after 50 years without a match, or at the datetime range.
                return

    def iter_after(self, t: dt.datetime) -> Iterator[dt.datetime]:
        """Slots strictly after ``t``, ascending."""
        t = _utc(t)
        wall, _ = walltime.to_wall(t, self._zone)
        previous: dt.datetime | None = None
        for candidate in self._walls(wall, reverse=False):
            instant = walltime.to_instant(candidate, self._zone)
            # In an overlap's second pass, the next wall times had their (first) occurrence
            # already, before t; in a gap several wall times share one instant.
            if instant > t and instant != previous:
                previous = instant
                yield instant

    def iter_before(self, t: dt.datetime) -> Iterator[dt.datetime]:
        t = _utc(t)
        wall, overlap = walltime.to_wall(t, self._zone)
        # cronsim's reverse iteration yields wall times strictly before its start.
        previous: dt.datetime | None = None
        for candidate in self._walls(wall + overlap + _SECOND, reverse=True):
            instant = walltime.to_instant(candidate, self._zone)
            if instant <= t and instant != previous:
                previous = instant
                yield instant

    def next_after(self, t: dt.datetime) -> dt.datetime:
        for slot in self.iter_after(t):
            return slot
        raise errors.ScheduleError(
            f"cron expression {self.cron!r} has no slot after {_utc(t).isoformat()}"
        )

    def prev_at_or_before(self, t: dt.datetime) -> dt.datetime | None:
        for slot in self.iter_before(t):
            return slot
        return None

    def slots_between(
        self, start: dt.datetime, end: dt.datetime, *, limit: int | None = None
    ) -> list[dt.datetime]:
        end = _utc(end)
        slots: list[dt.datetime] = []
        if limit is not None and limit <= 0:
            return slots
        for slot in self.iter_after(start):
            if slot > end:
                break
            slots.append(slot)
            if limit is not None and len(slots) >= limit:
                break
        return slots

    def canonical(self) -> str:
        return f"{_CRON_TZ}{self.timezone} {self.cron}"

    def describe(self) -> str:
        text = cronsim.CronSim(self._fields, dt.datetime(2000, 1, 1)).explain()
        return f"{text} ({self.timezone})"


def parse(
    expression: str | None = None, *, interval: str | None = None, timezone: str = "UTC"
) -> Expression:
    """Build an expression from user input: exactly one of a cron ``expression`` or an ``interval``.

    Intervals are epoch-aligned in UTC, so a ``timezone`` other than UTC is refused
    with them rather than silently ignored.
    """
    if (expression is None) == (interval is None):
        raise errors.ScheduleError(
            "give exactly one of a cron expression or an interval "
            f"(got cron={expression!r}, interval={interval!r})"
        )
    if interval is not None:
        walltime.load_zone(timezone)
        if timezone not in ("UTC", "Etc/UTC"):
            raise errors.ScheduleError(
                f"an interval is aligned to the Unix epoch in UTC, so time zone {timezone!r} "
                "would have no effect; drop the time zone, or use a cron expression for "
                "wall-clock times in that zone"
            )
        return IntervalExpression(parse_interval(interval))
    assert expression is not None
    return CronExpression(expression, timezone)


def parse_stored(text: str) -> Expression:
    """Read back :meth:`Expression.canonical`; a bare cron expression is taken as UTC."""
    stripped = text.strip()
    if stripped.startswith(_EVERY.strip()):
        return parse(interval=stripped[len(_EVERY.strip()) :].strip())
    if stripped.startswith(_CRON_TZ):
        zone, _, cron = stripped[len(_CRON_TZ) :].partition(" ")
        return parse(cron, timezone=zone)
    return parse(stripped)


def parse_interval(text: str) -> int:
    """Seconds in an interval: ``30s``, ``5m``, ``2h``, ``1d``, or ``1h30m`` (units descending)."""
    stripped = text.strip().lower()
    if stripped.startswith("-"):
        raise errors.ScheduleError(f"interval {text!r} is negative; it must be positive")
    match = _INTERVAL.match(stripped)
    if not stripped or match is None:
        raise errors.ScheduleError(
            f"interval {text!r} is not understood: use a whole number with a unit "
            "(s, m, h, d), e.g. '30s', '5m', '2h', '1d', or units combined from largest "
            "to smallest, e.g. '1h30m'"
        )
    seconds = sum(
        int(amount) * size
        for amount, (_, size) in zip(match.groups(), _UNITS, strict=True)
        if amount is not None
    )
    if seconds <= 0:
        raise errors.ScheduleError(f"interval {text!r} is zero; it must be at least 1s")
    if seconds > MAX_INTERVAL_SECONDS:
        raise errors.ScheduleError(
            f"interval {text!r} is longer than {MAX_INTERVAL_SECONDS // 86_400}d; "
            "use a cron expression for calendar schedules"
        )
    return seconds


def format_interval(seconds: int) -> str:
    """The canonical spelling of an interval: ``90`` -> ``1m30s``, ``86400`` -> ``1d``."""
    parts = []
    for unit, size in _UNITS:
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def _utc(t: dt.datetime) -> dt.datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"naive datetime {t!r}: schedule times must be timezone-aware")
    return t.astimezone(dt.UTC)


def _explain_cronsim(cron: str, message: str) -> str:
    """Reword cronsim's terse errors; only the 'day never exists' case should reach here."""
    if message == "Bad day-of-month":
        return (
            f"day-of-month in {cron!r} never occurs in the selected month(s), "
            "so the schedule would never run"
        )
    return f"cron expression {cron!r} is invalid: {message}"
