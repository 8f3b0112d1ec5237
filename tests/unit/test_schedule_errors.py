"""Bad schedule input is refused with a ScheduleError that says what and where.

Each case names the words the message must contain: the field or token at
fault and, for refused dialects, why (seconds, Quartz). A user reading only
the message should know what to change.
"""

from __future__ import annotations

import pytest

from jobwarden import schedules


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        # Each field out of range or misspelt.
        ("61 * * * *", ["minute value 61", "0-59"]),
        ("* 24 * * *", ["hour value 24", "0-23"]),
        ("* * 0 * *", ["day-of-month value 0", "1-31"]),
        ("* * 32 * *", ["day-of-month value 32"]),
        ("* * * 13 *", ["month value 13", "JAN-DEC"]),
        ("* * * 0 *", ["month value 0"]),
        ("* * * FOO *", ["'FOO' is not a valid month"]),
        ("* * * MON *", ["'MON' is not a valid month"]),
        ("* * * * 8", ["day-of-week value 8", "SUN-SAT"]),
        ("* * * * MONDAY", ["'MONDAY' is not a valid day-of-week"]),
        ("* * * * JAN", ["'JAN' is not a valid day-of-week"]),
        ("x * * * *", ["'X' is not a valid minute"]),
        ("-5 * * * *", ["missing minute value in '-5'"]),
        # Bad steps, ranges and lists.
        ("*/0 * * * *", ["step 0", "minute"]),
        ("*/x * * * *", ["bad step", "minute", "positive whole number"]),
        ("*/-5 * * * *", ["bad step", "minute"]),
        ("* */24 * * *", ["step 24", "hour"]),
        ("* * * * */7", ["step 7", "day-of-week"]),
        ("1/2/3 * * * *", ["bad step", "minute"]),
        ("5-1 * * * *", ["'5-1'", "minute", "backwards"]),
        ("* * * * SAT-MON", ["'SAT-MON'", "day-of-week", "backwards"]),
        ("1,,2 * * * *", ["empty list element", "minute"]),
        # Never-occurring days.
        ("0 0 31 2 *", ["day-of-month", "never"]),
        ("0 0 30 2 *", ["day-of-month", "never"]),
        ("0 0 31 4,6 *", ["day-of-month", "never"]),
        # Wrong shape.
        ("", ["empty"]),
        ("* * * *", ["4 fields", "expected 5"]),
        ("* * * * * * * *", ["8 fields", "expected 5"]),
        # Seconds and Quartz.
        ("0 */5 * * * *", ["6 fields", "seconds", "interval"]),
        ("0 0 12 * * ? 2024", ["7 fields", "Quartz"]),
        ("0 12 ? * MON", ["'?'", "day-of-month", "Quartz", "'*'"]),
        ("0 12 * * ?", ["'?'", "day-of-week", "Quartz"]),
        ("0 0 L * *", ["'L'", "day-of-month", "Quartz"]),
        ("0 0 LW * *", ["'LW'", "day-of-month", "Quartz"]),
        ("0 0 15W * *", ["'15W'", "day-of-month", "Quartz"]),
        ("0 0 * * 5L", ["'5L'", "day-of-week", "Quartz"]),
        ("0 0 * * FRIL", ["'FRIL'", "day-of-week", "Quartz"]),
        ("0 0 * * MON#2", ["'MON#2'", "day-of-week", "'#'", "Quartz"]),
        ("0 0 * * 1#1,3", ["'1#1'", "'#'", "Quartz"]),
        # Macros.
        ("@reboot", ["'@reboot'", "no time slots"]),
        ("@every 5m", ["interval", "interval='5m'"]),
        ("@fortnightly", ["unknown cron macro", "@daily"]),
    ],
)
def test_invalid_cron_is_refused_naming_the_field_or_token(cron: str, words: list[str]) -> None:
    with pytest.raises(schedules.ScheduleError) as caught:
        schedules.parse(cron)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    "cron",
    ["0 0 1 JUL *", "0 0 * * WED", "0 0 * * SUN,SAT", "0 0 * * 5-7", "0 0 1 APR-JUL/2 *"],
)
def test_names_containing_l_or_w_are_not_mistaken_for_quartz(cron: str) -> None:
    schedules.parse(cron)


@pytest.mark.parametrize(
    ("zone", "words"),
    [
        ("Mars/Olympus_Mons", ["unknown time zone", "'Mars/Olympus_Mons'", "Europe/Berlin"]),
        ("CEST", ["unknown time zone"]),
        ("../../etc/passwd", ["unknown time zone"]),
        ("", ["not an IANA zone name"]),
        (" UTC", ["not an IANA zone name"]),
    ],
)
def test_unknown_time_zone_is_refused(zone: str, words: list[str]) -> None:
    with pytest.raises(schedules.ScheduleError) as caught:
        schedules.parse("0 * * * *", timezone=zone)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("interval", "words"),
    [
        ("0s", ["zero", "at least 1s"]),
        ("0m", ["zero"]),
        ("0h0m", ["zero"]),
        ("-5m", ["negative", "positive"]),
        ("-1s", ["negative"]),
        ("", ["not understood"]),
        ("5", ["not understood", "unit"]),
        ("five minutes", ["not understood"]),
        ("5x", ["not understood"]),
        ("1.5h", ["not understood"]),
        ("1m1h", ["not understood", "largest to smallest"]),
        ("5m5m", ["not understood"]),
        ("400d", ["longer than 366d", "cron"]),
    ],
)
def test_invalid_interval_is_refused(interval: str, words: list[str]) -> None:
    with pytest.raises(schedules.ScheduleError) as caught:
        schedules.parse(interval=interval)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400), (" 10S ", 10)],
)
def test_valid_intervals_parse_to_seconds(interval: str, seconds: int) -> None:
    assert schedules.parse_interval(interval) == seconds


def test_exactly_one_of_cron_or_interval() -> None:
    with pytest.raises(schedules.ScheduleError, match="exactly one"):
        schedules.parse()
    with pytest.raises(schedules.ScheduleError, match="exactly one"):
        schedules.parse("* * * * *", interval="1m")


def test_an_interval_with_a_time_zone_is_refused_because_it_would_be_ignored() -> None:
    with pytest.raises(schedules.ScheduleError, match="aligned to the Unix epoch in UTC"):
        schedules.parse(interval="1d", timezone="Europe/Berlin")
    with pytest.raises(schedules.ScheduleError, match="unknown time zone"):
        schedules.parse(interval="1d", timezone="Nowhere/Land")


def test_interval_expression_refuses_non_positive_seconds_directly() -> None:
    with pytest.raises(schedules.ScheduleError, match="between 1s"):
        schedules.IntervalExpression(0)
    with pytest.raises(schedules.ScheduleError, match="between 1s"):
        schedules.IntervalExpression(-60)


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        ("CRON_TZ=Nowhere/Land 0 * * * *", ["unknown time zone"]),
        ("CRON_TZ=UTC 0 0 L * *", ["Quartz"]),
        ("@every 0s", ["zero"]),
    ],
)
def test_corrupt_stored_forms_are_refused(stored: str, words: list[str]) -> None:
    with pytest.raises(schedules.ScheduleError) as caught:
        schedules.parse_stored(stored)
    for word in words:
        assert word in str(caught.value)


def test_schedule_error_is_a_value_error() -> None:
    assert issubclass(schedules.ScheduleError, ValueError)
