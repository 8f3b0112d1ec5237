"""Slots of cron and interval expressions, as tables a reader can check by hand.

Expected slots are written in the schedule's own zone (with the offset), the
way an operator would read them off a wall clock; the DST rows are the
spring-forward and fall-back days of 2024 in Europe/Berlin (02:00 -> 03:00 on
31 March, 03:00 -> 02:00 on 27 October) and America/New_York (02:00 -> 03:00
on 10 March, 02:00 -> 01:00 on 3 November).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from jobwarden import schedules

UTC = dt.UTC


def at(text: str, zone: str = "UTC") -> dt.datetime:
    """An aware datetime from 'YYYY-MM-DD HH:MM[:SS]' read in ``zone`` (first occurrence)."""
    naive = dt.datetime.fromisoformat(text)
    return naive.replace(tzinfo=zoneinfo.ZoneInfo(zone)).astimezone(UTC)


def local(slots: list[dt.datetime], zone: str) -> list[str]:
    tz = zoneinfo.ZoneInfo(zone)
    return [slot.astimezone(tz).isoformat() for slot in slots]


CRON_TABLE = [
    # --- DST gap: the missing 02:30 runs at the jump (03:00 local), the same day.
    pytest.param(
        "30 2 * * *", "Europe/Berlin", "2024-03-30 00:00",
        ["2024-03-30T02:30:00+01:00", "2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"],
        id="berlin-gap-daily-0230-runs-at-0300",
    ),
    pytest.param(
        "30 2 * * *", "America/New_York", "2024-03-09 00:00",
        ["2024-03-09T02:30:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00"],
        id="new-york-gap-daily-0230-runs-at-0300",
    ),
    pytest.param(
        "0 * * * *", "America/New_York", "2024-03-10 00:30",
        ["2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"],
        id="new-york-gap-hourly-0200-merges-into-0300",
    ),
    pytest.param(
        "*/20 * * * *", "Europe/Berlin", "2024-03-31 01:30",
        ["2024-03-31T01:40:00+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T03:20:00+02:00"],
        id="berlin-gap-every-20-minutes-skips-the-missing-hour-once",
    ),
    # --- DST overlap: a repeated wall time runs once, at its first occurrence.
    pytest.param(
        "30 2 * * *", "Europe/Berlin", "2024-10-26 00:00",
        ["2024-10-26T02:30:00+02:00", "2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"],
        id="berlin-overlap-daily-0230-runs-once",
    ),
    pytest.param(
        "30 1 * * *", "America/New_York", "2024-11-02 00:00",
        ["2024-11-02T01:30:00-04:00", "2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"],
        id="new-york-overlap-daily-0130-runs-once",
    ),
    pytest.param(
        "*/30 * * * *", "Europe/Berlin", "2024-10-27 01:45",
        ["2024-10-27T02:00:00+02:00", "2024-10-27T02:30:00+02:00", "2024-10-27T03:00:00+01:00"],
        id="berlin-overlap-half-hourly-skips-the-repeated-hour",
    ),
    pytest.param(
        "0 * * * *", "America/New_York", "2024-11-03 00:30",
        ["2024-11-03T01:00:00-04:00", "2024-11-03T02:00:00-05:00", "2024-11-03T03:00:00-05:00"],
        id="new-york-overlap-hourly-0100-once",
    ),
    # --- Month ends and leap days.
    pytest.param(
        "0 0 31 * *", "UTC", "2024-01-01 00:00",
        ["2024-01-31T00:00:00+00:00", "2024-03-31T00:00:00+00:00", "2024-05-31T00:00:00+00:00",
         "2024-07-31T00:00:00+00:00"],
        id="day-31-only-in-long-months",
    ),
    pytest.param(
        "0 0 29 2 *", "UTC", "2021-01-01 00:00",
        ["2024-02-29T00:00:00+00:00", "2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
        id="leap-day-only-in-leap-years",
    ),
    pytest.param(
        "0 12 30 * *", "UTC", "2024-01-30 12:00",
        ["2024-03-30T12:00:00+00:00", "2024-04-30T12:00:00+00:00"],
        id="day-30-skips-february",
    ),
    # --- Names, ranges, lists and steps.
    pytest.param(
        "0 9 * * MON-FRI", "UTC", "2024-03-01 09:00",
        ["2024-03-04T09:00:00+00:00", "2024-03-05T09:00:00+00:00", "2024-03-06T09:00:00+00:00"],
        id="weekday-names-range-skips-weekend",
    ),
    pytest.param(
        "0 0 1 jan,Jul *", "UTC", "2024-01-01 00:00",
        ["2024-07-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00"],
        id="month-names-any-case",
    ),
    pytest.param(
        "*/20 9-10 * * *", "UTC", "2024-01-01 00:00",
        ["2024-01-01T09:00:00+00:00", "2024-01-01T09:20:00+00:00", "2024-01-01T09:40:00+00:00",
         "2024-01-01T10:00:00+00:00", "2024-01-01T10:20:00+00:00", "2024-01-01T10:40:00+00:00",
         "2024-01-02T09:00:00+00:00"],
        id="step-over-hour-range",
    ),
    pytest.param(
        "5-20/5 * * * *", "UTC", "2024-01-01 00:00",
        ["2024-01-01T00:05:00+00:00", "2024-01-01T00:10:00+00:00", "2024-01-01T00:15:00+00:00",
         "2024-01-01T00:20:00+00:00", "2024-01-01T01:05:00+00:00"],
        id="stepped-range",
    ),
    pytest.param(
        "0 0 * JAN-DEC/3 *", "UTC", "2024-01-01 00:00",
        ["2024-01-02T00:00:00+00:00"],
        id="stepped-month-names-range",
    ),
    pytest.param(
        "0 0 13 * FRI", "UTC", "2024-10-01 00:00",
        ["2024-10-04T00:00:00+00:00", "2024-10-11T00:00:00+00:00", "2024-10-13T00:00:00+00:00",
         "2024-10-18T00:00:00+00:00"],
        id="day-of-month-or-day-of-week-when-both-restricted",
    ),
    pytest.param(
        "0 12 * * 7", "UTC", "2024-01-01 00:00",
        ["2024-01-07T12:00:00+00:00", "2024-01-14T12:00:00+00:00"],
        id="seven-is-sunday",
    ),
    # --- Macros.
    pytest.param("@hourly", "UTC", "2024-01-01 00:00",
                 ["2024-01-01T01:00:00+00:00", "2024-01-01T02:00:00+00:00"], id="hourly"),
    pytest.param("@daily", "UTC", "2024-01-01 00:00",
                 ["2024-01-02T00:00:00+00:00", "2024-01-03T00:00:00+00:00"], id="daily"),
    pytest.param("@midnight", "Europe/Berlin", "2024-01-01 00:00",
                 ["2024-01-02T00:00:00+01:00", "2024-01-03T00:00:00+01:00"], id="midnight"),
    pytest.param("@weekly", "UTC", "2024-01-01 00:00",
                 ["2024-01-07T00:00:00+00:00", "2024-01-14T00:00:00+00:00"], id="weekly-sunday"),
    pytest.param("@monthly", "UTC", "2024-01-15 00:00",
                 ["2024-02-01T00:00:00+00:00", "2024-03-01T00:00:00+00:00"], id="monthly"),
    pytest.param("@yearly", "UTC", "2024-01-01 00:00",
                 ["2025-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"], id="yearly"),
    pytest.param("@annually", "UTC", "2024-06-01 00:00",
                 ["2025-01-01T00:00:00+00:00"], id="annually"),
]  # fmt: skip


@pytest.mark.parametrize(("cron", "zone", "start", "expected"), CRON_TABLE)
def test_cron_slots_after_a_start_are_the_listed_wall_clock_times(
    cron: str, zone: str, start: str, expected: list[str]
) -> None:
    expr = schedules.parse(cron, timezone=zone)
    begin = at(start, zone)
    far = begin + dt.timedelta(days=20 * 366)
    assert local(expr.slots_between(begin, far, limit=len(expected)), zone) == expected


INTERVAL_TABLE = [
    pytest.param("30s", "2024-01-01 12:00:10",
                 ["2024-01-01T12:00:30+00:00", "2024-01-01T12:01:00+00:00"], id="30s"),
    pytest.param("5m", "2024-01-01 12:03:00",
                 ["2024-01-01T12:05:00+00:00", "2024-01-01T12:10:00+00:00"], id="5m"),
    pytest.param("2h", "2024-01-01 01:00:00",
                 ["2024-01-01T02:00:00+00:00", "2024-01-01T04:00:00+00:00"], id="2h-even-hours"),
    pytest.param("1h30m", "2024-01-01 00:00:00",
                 ["2024-01-01T01:30:00+00:00", "2024-01-01T03:00:00+00:00"], id="1h30m"),
    pytest.param("7d", "2024-01-01 00:00:00",
                 ["2024-01-04T00:00:00+00:00", "2024-01-11T00:00:00+00:00"],
                 id="7d-on-thursdays-like-the-epoch"),
    pytest.param("1d", "2024-03-30 23:00:00",
                 ["2024-03-31T00:00:00+00:00", "2024-04-01T00:00:00+00:00"], id="1d-ignores-dst"),
]  # fmt: skip


@pytest.mark.parametrize(("interval", "start", "expected"), INTERVAL_TABLE)
def test_interval_slots_are_multiples_of_the_period_since_the_epoch(
    interval: str, start: str, expected: list[str]
) -> None:
    expr = schedules.parse(interval=interval)
    begin = at(start)
    assert local(expr.slots_between(begin, begin + dt.timedelta(days=30), limit=2), "UTC") == (
        expected
    )


@pytest.mark.parametrize(
    ("cron", "zone", "t", "prev", "next_"),
    [
        pytest.param(
            "0 * * * *", "UTC", "2024-01-01 05:00", "2024-01-01T05:00:00+00:00",
            "2024-01-01T06:00:00+00:00", id="on-a-slot-prev-is-it-next-is-after",
        ),
        pytest.param(
            "0 * * * *", "UTC", "2024-01-01 05:00:00.000001", "2024-01-01T05:00:00+00:00",
            "2024-01-01T06:00:00+00:00", id="a-microsecond-after-a-slot",
        ),
        pytest.param(
            "0 * * * *", "UTC", "2024-01-01 04:59:59.999999", "2024-01-01T04:00:00+00:00",
            "2024-01-01T05:00:00+00:00", id="a-microsecond-before-a-slot",
        ),
        pytest.param(
            "30 2 * * *", "Europe/Berlin", "2024-03-31 03:00", "2024-03-31T03:00:00+02:00",
            "2024-04-01T02:30:00+02:00", id="at-the-gap-jump",
        ),
        pytest.param(
            "30 2 * * *", "Europe/Berlin", "2024-03-31 01:59:59", "2024-03-30T02:30:00+01:00",
            "2024-03-31T03:00:00+02:00", id="just-before-the-gap",
        ),
        pytest.param(
            "0 0 29 2 *", "UTC", "2027-06-01 00:00", "2024-02-29T00:00:00+00:00",
            "2028-02-29T00:00:00+00:00", id="years-apart",
        ),
    ],
)  # fmt: skip
def test_prev_at_or_before_and_next_after_bracket_t(
    cron: str, zone: str, t: str, prev: str, next_: str
) -> None:
    expr = schedules.parse(cron, timezone=zone)
    when = at(t, zone)
    previous = expr.prev_at_or_before(when)
    assert previous is not None
    assert local([previous, expr.next_after(when)], zone) == [prev, next_]


def test_in_the_second_pass_of_an_overlap_the_first_pass_slots_are_already_past() -> None:
    expr = schedules.parse("*/30 * * * *", timezone="Europe/Berlin")
    second_pass = dt.datetime(2024, 10, 27, 1, 10, tzinfo=UTC)  # 02:10 CET, after the fall-back
    assert local([second_pass], "Europe/Berlin") == ["2024-10-27T02:10:00+01:00"]
    previous = expr.prev_at_or_before(second_pass)
    assert previous is not None
    assert local([previous, expr.next_after(second_pass)], "Europe/Berlin") == [
        "2024-10-27T02:30:00+02:00",
        "2024-10-27T03:00:00+01:00",
    ]


def test_reverse_iteration_lists_the_same_slots_as_forward_across_dst() -> None:
    expr = schedules.parse("*/20 1-3 * * *", timezone="Europe/Berlin")
    start, end = at("2024-10-26 12:00", "Europe/Berlin"), at("2024-10-28 12:00", "Europe/Berlin")
    forward = expr.slots_between(start, end)
    backward = []
    for slot in expr.iter_before(end):
        if slot <= start:
            break
        backward.append(slot)
    assert backward[::-1] == forward
    assert len(forward) == 2 * 9  # 01:00..03:40 is 9 wall times a day, the repeated hour once


def test_slots_between_excludes_start_includes_end_and_stops_at_limit() -> None:
    expr = schedules.parse("0 * * * *")
    start, end = at("2024-01-01 01:00"), at("2024-01-01 04:00")
    assert local(expr.slots_between(start, end), "UTC") == [
        "2024-01-01T02:00:00+00:00",
        "2024-01-01T03:00:00+00:00",
        "2024-01-01T04:00:00+00:00",
    ]
    assert len(expr.slots_between(start, end, limit=2)) == 2
    assert expr.slots_between(start, end, limit=0) == []
    assert expr.slots_between(end, start) == []


def test_interval_slots_between_excludes_start_includes_end_and_stops_at_limit() -> None:
    expr = schedules.parse(interval="1h")
    start, end = at("2024-01-01 01:00"), at("2024-01-01 04:00")
    assert [s.hour for s in expr.slots_between(start, end)] == [2, 3, 4]
    assert [s.hour for s in expr.slots_between(start, end, limit=2)] == [2, 3]
    assert expr.slots_between(start, end, limit=0) == []
    assert expr.slots_between(end, start) == []


def test_slots_are_utc_whatever_zone_the_input_is_in() -> None:
    expr = schedules.parse("30 2 * * *", timezone="Europe/Berlin")
    tokyo = dt.datetime(2024, 6, 1, 12, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))
    slot = expr.next_after(tokyo)
    assert slot.tzinfo is UTC
    assert slot == at("2024-06-02 02:30", "Europe/Berlin")


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        schedules.parse("* * * * *").next_after(dt.datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        schedules.parse(interval="1m").prev_at_or_before(dt.datetime(2024, 1, 1))


def test_matches_is_true_only_on_a_slot() -> None:
    expr = schedules.parse("15 * * * *")
    assert expr.matches(at("2024-01-01 03:15"))
    assert not expr.matches(at("2024-01-01 03:15:01"))
    assert schedules.parse(interval="10s").matches(at("2024-01-01 03:15:10"))


@pytest.mark.parametrize(
    ("kwargs", "stored"),
    [
        ({"expression": "  */5   9-17 * * mon-fri "}, "CRON_TZ=UTC */5 9-17 * * MON-FRI"),
        ({"expression": "@Daily", "timezone": "Europe/Berlin"}, "CRON_TZ=Europe/Berlin @daily"),
        ({"expression": "0 0 1 jan *", "timezone": "Etc/UTC"}, "CRON_TZ=Etc/UTC 0 0 1 JAN *"),
        ({"interval": "90s"}, "@every 1m30s"),
        ({"interval": "1d2h"}, "@every 1d2h"),
        ({"interval": "120m"}, "@every 2h"),
    ],
)
def test_canonical_form_is_normalised_and_parses_back_equal(
    kwargs: dict[str, str], stored: str
) -> None:
    expr = schedules.parse(**kwargs)
    assert expr.canonical() == stored
    again = schedules.parse_stored(stored)
    assert again == expr
    assert hash(again) == hash(expr)
    assert again.canonical() == stored


def test_a_bare_stored_cron_expression_is_utc() -> None:
    assert schedules.parse_stored("0 * * * *") == schedules.parse("0 * * * *", timezone="UTC")


def test_describe_says_when_and_where_in_words() -> None:
    assert schedules.parse("30 2 * * *", timezone="Europe/Berlin").describe() == (
        "At 02:30 every day (Europe/Berlin)"
    )
    assert schedules.parse(interval="1h30m").describe() == (
        "every 1h30m (aligned to the Unix epoch, UTC)"
    )


def test_interval_formatting_uses_the_largest_units() -> None:
    assert [schedules.format_interval(s) for s in (1, 59, 60, 3600, 5400, 86_400, 90_061)] == [
        "1s",
        "59s",
        "1m",
        "1h",
        "1h30m",
        "1d",
        "1d1h1m1s",
    ]
