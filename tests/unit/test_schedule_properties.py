"""Properties of slots over random expressions, zones and times (hypothesis).

The oracle is independent of cronsim: it walks every UTC minute of a short
range and decides from the field value sets the strategy generated, with the
DST rule spelled out directly (a minute is a slot if its local wall time
matches and is the first occurrence of that wall time, or if the clocks jump
forward at that minute over at least one matching wall time). Start times are
drawn near real DST transitions so the rule is exercised, not just sampled.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import zoneinfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobwarden import schedules

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Pacific/Apia",  # skipped 30 December 2011 entirely
]
FAST = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@dataclasses.dataclass(frozen=True)
class Generated:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_and: bool

    def matches(self, wall: dt.datetime) -> bool:
        day = wall.day in self.days
        weekday = (wall.isoweekday() % 7) in self.weekdays
        days_match = (day and weekday) if self.day_and else (day or weekday)
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and days_match
        )


@st.composite
def field(
    draw: st.DrawFn, low: int, high: int, *, star: int | None = None, loose: int = 1
) -> tuple[str, set[int]]:
    """A field's text and the values it means; ``star`` is what '*' reaches if not ``high``.

    ``loose`` weights '*' and steps, so day and month fields usually allow the
    DST transition dates and the gap and overlap hours actually get slots.
    """
    kind = draw(st.sampled_from(["star", "step"] * loose + ["value", "range", "list"]))
    if kind == "star":
        return "*", set(range(low, (star or high) + 1))
    if kind == "step":
        step = draw(st.integers(2, max(2, (high - low) // 2)))
        return f"*/{step}", set(range(low, high + 1, step))
    if kind == "value":
        value = draw(st.integers(low, high))
        return str(value), {value}
    if kind == "range":
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        return f"{a}-{b}", set(range(a, b + 1))
    values = draw(st.lists(st.integers(low, high), min_size=2, max_size=4, unique=True))
    return ",".join(map(str, values)), set(values)


@st.composite
def cron_expressions(draw: st.DrawFn) -> Generated:
    minute, minutes = draw(field(0, 59))
    hour, hours = draw(field(0, 23, loose=2))
    month, months = draw(field(1, 12, loose=4))
    # Keep days satisfiable within the chosen months so the range has slots to find.
    day, days = draw(field(1, 28, star=31, loose=4))
    weekday, weekdays = draw(field(0, 6, loose=4))
    day_and = day.startswith("*") or weekday.startswith("*")
    return Generated(
        text=f"{minute} {hour} {day} {month} {weekday}",
        minutes=frozenset(minutes),
        hours=frozenset(hours),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        day_and=day_and,
    )


@functools.cache
def transitions(zone: str) -> list[dt.datetime]:
    """UTC instants where the zone's offset changes, in a few sample years."""
    tz = zoneinfo.ZoneInfo(zone)
    found: list[dt.datetime] = []
    for year in (2011, 2012, 2024, 2031):
        probe = dt.datetime(year, 1, 1, tzinfo=UTC)
        while probe.year == year:
            after = probe + dt.timedelta(days=7)
            if probe.astimezone(tz).utcoffset() != after.astimezone(tz).utcoffset():
                low, high = probe, after
                while high - low > MINUTE:
                    middle = low + (high - low) / 2
                    middle = middle.replace(second=0, microsecond=0)
                    if middle.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                        low = middle
                    else:
                        high = middle
                found.append(high)
            probe = after
    return found or [dt.datetime(2024, 1, 1, tzinfo=UTC)]  # a zone without DST


@st.composite
def zone_and_start(draw: st.DrawFn) -> tuple[str, dt.datetime]:
    zone = draw(st.sampled_from(ZONES))
    if draw(st.booleans()):
        # Start up to three hours before a transition, so the range usually spans it.
        anchor = draw(st.sampled_from(transitions(zone)))
        shift = dt.timedelta(minutes=draw(st.integers(-3 * 60, 0)))
    else:
        anchor = draw(st.datetimes(dt.datetime(1980, 1, 1), dt.datetime(2035, 1, 1))).replace(
            tzinfo=UTC
        )
        shift = dt.timedelta(0)
    micro = dt.timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 999_999])))
    return zone, (anchor + shift).replace(second=0, microsecond=0) + micro


def oracle(expr: Generated, zone: str, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    tz = zoneinfo.ZoneInfo(zone)
    slots = []
    minute = start.replace(second=0, microsecond=0) + MINUTE
    while minute <= end:
        here = minute.astimezone(tz)
        before = (minute - dt.timedelta(seconds=1)).astimezone(tz)
        wall = here.replace(tzinfo=None)
        if here.fold == 0 and expr.matches(wall):
            slots.append(minute)
        else:
            jump = here.utcoffset() - before.utcoffset()  # type: ignore[operator]
            if jump > dt.timedelta(0):  # the wall times in [wall - jump, wall) never happen
                skipped = wall - jump
                while skipped < wall:
                    if expr.matches(skipped):
                        slots.append(minute)
                        break
                    skipped += MINUTE
        minute += MINUTE
    return slots


def every_day(minutes: range | list[int], hours: range | list[int]) -> Generated:
    """A daily expression written as explicit lists, with its value sets."""
    text = f"{','.join(map(str, minutes))} {','.join(map(str, hours))} * * *"
    return Generated(
        text=text,
        minutes=frozenset(minutes),
        hours=frozenset(hours),
        days=frozenset(range(1, 32)),
        months=frozenset(range(1, 13)),
        weekdays=frozenset(range(7)),
        day_and=True,
    )


DST_EXPRESSIONS = [
    every_day(range(60), range(24)),  # every minute
    every_day(range(0, 60, 7), range(24)),
    every_day([30], range(24)),
    every_day([0], range(0, 24, 2)),
    every_day([15, 45], [1, 2, 3]),
    every_day([0], [2]),
    every_day([30], [2]),
    every_day([59], [1, 2]),
]


@pytest.mark.parametrize("zone", [zone for zone in ZONES if zone not in ("UTC", "Asia/Kolkata")])
def test_around_every_sampled_transition_slots_are_exactly_the_oracles(zone: str) -> None:
    """Deterministic sweep: each gap and overlap of the sample years, several expressions."""
    for transition in transitions(zone):
        start, end = transition - dt.timedelta(hours=3), transition + dt.timedelta(hours=3)
        for expr in DST_EXPRESSIONS:
            parsed = schedules.parse(expr.text, timezone=zone)
            expected = oracle(expr, zone, start, end)
            context = (zone, transition, expr.text)
            assert parsed.slots_between(start, end) == expected, context
            backward = list(itertools.takewhile(start.__lt__, parsed.iter_before(end)))
            assert backward[::-1] == expected, context
            # prev/next from instants inside the gap's surroundings and the repeated hour.
            for minutes in range(-60, 150, 30):
                t = transition + dt.timedelta(minutes=minutes, seconds=30)
                earlier = [slot for slot in expected if slot <= t]
                later = [slot for slot in expected if slot > t]
                if earlier:
                    assert parsed.prev_at_or_before(t) == earlier[-1], (*context, t)
                if later:
                    assert parsed.next_after(t) == later[0], (*context, t)


@FAST
@given(cron_expressions(), zone_and_start(), st.integers(1, 24))
def test_cron_slots_are_exactly_the_oracles_minutes(
    expr: Generated, zone_start: tuple[str, dt.datetime], hours: int
) -> None:
    zone, start = zone_start
    end = start + dt.timedelta(hours=hours)
    parsed = schedules.parse(expr.text, timezone=zone)
    slots = parsed.slots_between(start, end)
    assert slots == oracle(expr, zone, start, end)
    assert all(a < b for a, b in itertools.pairwise(slots))
    assert all(slot.tzinfo is UTC and slot.second == 0 for slot in slots)


@FAST
@given(cron_expressions(), zone_and_start())
def test_cron_prev_and_next_bracket_any_instant_with_no_slot_between(
    expr: Generated, zone_start: tuple[str, dt.datetime]
) -> None:
    zone, t = zone_start
    parsed = schedules.parse(expr.text, timezone=zone)
    following = parsed.next_after(t)
    previous = parsed.prev_at_or_before(t)
    assert following > t
    assert previous is not None and previous <= t
    assert parsed.slots_between(previous, following) == [following]
    assert parsed.next_after(previous) == following
    assert parsed.matches(previous) and parsed.matches(following)


@FAST
@given(st.integers(1, 3 * 86_400), st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2100, 1, 1)))
def test_interval_slots_are_epoch_multiples_one_period_apart(
    seconds: int, naive: dt.datetime
) -> None:
    expr = schedules.IntervalExpression(seconds)
    t = naive.replace(tzinfo=UTC)
    previous, following = expr.prev_at_or_before(t), expr.next_after(t)
    assert previous is not None
    assert previous <= t < following
    assert following - previous == dt.timedelta(seconds=seconds)
    for slot in expr.slots_between(t, t + dt.timedelta(seconds=seconds * 5)):
        assert int(slot.timestamp()) % seconds == 0
        assert slot.microsecond == 0


@FAST
@given(
    cron_expressions(),
    zone_and_start(),
    st.integers(0, 30 * 60),
    st.sampled_from(["latest", "none", "all"]),
    st.integers(60, 6 * 3600),
    st.integers(1, 5),
)
def test_every_slot_of_an_outage_runs_or_is_counted_missed(
    expr: Generated,
    zone_start: tuple[str, dt.datetime],
    outage_minutes: int,
    catch_up: schedules.CatchUp,
    window: int,
    cap: int,
) -> None:
    zone, last = zone_start
    now = last + dt.timedelta(minutes=outage_minutes, seconds=7)
    parsed = schedules.parse(expr.text, timezone=zone)
    plan = schedules.plan_due(
        parsed, last_slot=last, now=now, catch_up=catch_up, window_seconds=window,
        catch_up_max=cap,
    )  # fmt: skip
    slots = parsed.slots_between(last, now)
    assert plan.missed_exact
    assert len(plan.run) + plan.missed == len(slots)
    assert plan.run == sorted(plan.run) and set(plan.run) <= set(slots)
    limit = cap if catch_up == "all" else 1
    assert len(plan.run) <= limit
    runnable = [s for s in slots if now - s <= dt.timedelta(seconds=window)]
    if catch_up == "all":
        assert plan.run == runnable[-cap:]
    elif catch_up == "latest":
        assert plan.run == runnable[-1:]
    assert plan.next_slot == parsed.next_after(now)
