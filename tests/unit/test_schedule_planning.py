"""Catch-up planning after an outage, with "now" injected instead of waited for.

Every case checks the whole fate of the outage: which slots run, how many are
counted missed, and that the two add up to the slots in (last_slot, now].
"""

from __future__ import annotations

import datetime as dt

import pytest

from jobwarden import schedules

UTC = dt.UTC
HOURLY = schedules.parse("0 * * * *")
DAILY = schedules.parse("0 3 * * *")
MINUTELY = schedules.parse("* * * * *")


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def hhmm(slots: list[dt.datetime]) -> list[str]:
    return [slot.strftime("%d %H:%M") for slot in slots]


def test_a_new_schedule_starts_from_now_without_backfill() -> None:
    plan = schedules.plan_due(HOURLY, last_slot=None, now=at("2024-01-01 05:30"))
    assert plan.run == []
    assert plan.missed == 0
    assert plan.next_slot == at("2024-01-01 06:00")
    assert plan.cursor == at("2024-01-01 05:30")


def test_a_new_schedule_created_exactly_on_a_slot_runs_it() -> None:
    plan = schedules.plan_due(HOURLY, last_slot=None, now=at("2024-01-01 05:00"))
    assert plan.run == [at("2024-01-01 05:00")]
    assert plan.missed == 0


def test_without_an_outage_the_one_due_slot_runs() -> None:
    plan = schedules.plan_due(
        HOURLY, last_slot=at("2024-01-01 04:00"), now=at("2024-01-01 05:00:10")
    )
    assert hhmm(plan.run) == ["01 05:00"]
    assert plan.missed == 0
    assert plan.next_slot == at("2024-01-01 06:00")
    assert plan.cursor == at("2024-01-01 05:00:10")


def test_nothing_due_between_slots() -> None:
    plan = schedules.plan_due(
        HOURLY, last_slot=at("2024-01-01 05:00"), now=at("2024-01-01 05:59:59")
    )
    assert (plan.run, plan.missed) == ([], 0)


def test_a_slot_at_or_before_last_slot_never_runs_again() -> None:
    last = at("2024-01-01 05:00")
    for now in (at("2024-01-01 05:00"), at("2024-01-01 04:00")):
        plan = schedules.plan_due(HOURLY, last_slot=last, now=now, catch_up="all", catch_up_max=9)
        assert (plan.run, plan.missed) == ([], 0)
        assert plan.cursor == last
        assert plan.next_slot == at("2024-01-01 06:00")


@pytest.mark.parametrize(
    ("now", "window", "run", "missed"),
    [
        # 5 slots (01..05 h) in the outage; the newest is 30 min old.
        ("2024-01-01 05:30", 3600, ["01 05:00"], 4),
        ("2024-01-01 05:30", 1800, ["01 05:00"], 4),  # exactly at the window edge: runs
        ("2024-01-01 05:30", 1799, [], 5),  # one second too old: missed like the rest
        ("2024-01-01 05:30", 60, [], 5),
    ],
)
def test_latest_runs_the_newest_missed_slot_if_within_the_window(
    now: str, window: int, run: list[str], missed: int
) -> None:
    plan = schedules.plan_due(
        HOURLY, last_slot=at("2024-01-01 00:00"), now=at(now), catch_up="latest",
        window_seconds=window,
    )  # fmt: skip
    assert hhmm(plan.run) == run
    assert plan.missed == missed
    assert plan.missed_exact


@pytest.mark.parametrize(
    ("now", "tolerance", "run", "missed"),
    [
        ("2024-01-01 05:00:30", 60, ["01 05:00"], 4),  # the current slot, seen on time
        ("2024-01-01 05:01:00", 60, ["01 05:00"], 4),  # at the tolerance edge
        ("2024-01-01 05:01:01", 60, [], 5),  # late: not current any more
        ("2024-01-01 05:00:20", 15, [], 5),
    ],
)
def test_none_runs_only_the_current_slot(
    now: str, tolerance: int, run: list[str], missed: int
) -> None:
    plan = schedules.plan_due(
        HOURLY, last_slot=at("2024-01-01 00:00"), now=at(now), catch_up="none",
        tolerance_seconds=tolerance,
    )  # fmt: skip
    assert hhmm(plan.run) == run
    assert plan.missed == missed


@pytest.mark.parametrize(
    ("window_hours", "cap", "run", "missed"),
    [
        (24, 24, ["01 01:00", "01 02:00", "01 03:00", "01 04:00", "01 05:00"], 0),
        (24, 3, ["01 03:00", "01 04:00", "01 05:00"], 2),  # the newest ones, oldest missed
        (2, 9, ["01 04:00", "01 05:00"], 3),  # window 05:30-2h = 03:30: 04:00 and 05:00
        (24, 1, ["01 05:00"], 4),
    ],
)
def test_all_runs_every_slot_in_the_window_up_to_the_cap(
    window_hours: int, cap: int, run: list[str], missed: int
) -> None:
    plan = schedules.plan_due(
        HOURLY, last_slot=at("2024-01-01 00:00"), now=at("2024-01-01 05:30"), catch_up="all",
        window_seconds=window_hours * 3600, catch_up_max=cap,
    )  # fmt: skip
    assert hhmm(plan.run) == run
    assert plan.missed == missed


def test_all_with_an_interval_runs_the_newest_slots_and_counts_the_rest() -> None:
    every_10s = schedules.parse(interval="10s")
    plan = schedules.plan_due(
        every_10s, last_slot=at("2024-01-01 00:00"), now=at("2024-01-01 00:01:05"),
        catch_up="all", window_seconds=60, catch_up_max=100,
    )  # fmt: skip
    # 6 slots (00:10 .. 01:00); now-60s = 00:05, so all six are in the window.
    assert [s.strftime("%M:%S") for s in plan.run] == [
        "00:10", "00:20", "00:30", "00:40", "00:50", "01:00",
    ]  # fmt: skip
    assert plan.missed == 0


def test_a_daily_job_after_a_weekend_outage_with_latest() -> None:
    plan = schedules.plan_due(
        DAILY, last_slot=at("2024-01-05 03:00"), now=at("2024-01-08 03:20"), catch_up="latest"
    )
    assert hhmm(plan.run) == ["08 03:00"]
    assert plan.missed == 2
    assert plan.next_slot == at("2024-01-09 03:00")


def test_years_of_interval_slots_are_counted_by_arithmetic() -> None:
    every_second = schedules.parse(interval="1s")
    plan = schedules.plan_due(
        every_second, last_slot=at("2014-01-01 00:00"), now=at("2024-01-01 00:00"),
        catch_up="all", catch_up_max=5, window_seconds=3600,
    )  # fmt: skip
    slots = (at("2024-01-01 00:00") - at("2014-01-01 00:00")) // dt.timedelta(seconds=1)
    assert len(plan.run) == 5
    assert plan.missed == slots - 5
    assert plan.missed_exact


def test_years_of_cron_slots_stop_counting_at_the_limit_and_say_so() -> None:
    plan = schedules.plan_due(
        MINUTELY, last_slot=at("2019-01-01 00:00"), now=at("2024-01-01 00:00:30"),
        count_limit=500,
    )  # fmt: skip
    assert hhmm(plan.run) == ["01 00:00"]
    assert plan.missed == 499  # a lower bound: 500 slots looked at, one of them run
    assert not plan.missed_exact
    assert plan.cursor == at("2024-01-01 00:00:30")


def test_a_cron_outage_exactly_at_the_count_limit_is_still_exact() -> None:
    plan = schedules.plan_due(
        MINUTELY, last_slot=at("2024-01-01 00:00"), now=at("2024-01-01 00:10"), count_limit=10
    )
    assert (len(plan.run), plan.missed, plan.missed_exact) == (1, 9, True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_seconds": 59}, "at least 60s"),
        ({"window_seconds": 0}, "at least 60s"),
        ({"catch_up": "sometimes"}, "'latest', 'none', 'all'"),
        ({"catch_up_max": 0}, "max catch-up must be at least 1"),
        ({"max_catch_up": 0}, "max catch-up must be at least 1"),
        ({"tolerance_seconds": -1}, "tolerance"),
        ({"count_limit": 0}, "count limit"),
    ],
)
def test_bad_catch_up_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(schedules.ScheduleError, match=message):
        schedules.plan_due(HOURLY, last_slot=None, now=at("2024-01-01 00:00"), **kwargs)  # type: ignore[arg-type]


def test_max_catch_up_the_0_1_0_name_of_catch_up_max_still_caps_the_run() -> None:
    last, now = at("2024-01-01 00:00"), at("2024-01-01 12:00")
    old = schedules.plan_due(HOURLY, last_slot=last, now=now, catch_up="all",
                             window_seconds=86400, max_catch_up=3)
    new = schedules.plan_due(HOURLY, last_slot=last, now=now, catch_up="all",
                             window_seconds=86400, catch_up_max=3)
    assert old == new
    assert (len(new.run), new.missed) == (3, 9)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        schedules.plan_due(HOURLY, last_slot=None, now=dt.datetime(2024, 1, 1))
