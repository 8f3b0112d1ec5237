"""The schedule store (``client.schedules``): definitions are validated, stored, and changed
by rules that give every slot a fate."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from jobwarden.api.client import Client
from jobwarden.observability import metrics
from jobwarden.schedules import ScheduleError
from jobwarden.schedules.store import slot_key, validate
from tests.support import schedulejobs

T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
JOB = "tests.support.schedulejobs:Tick"


def _missed(name: str) -> float:
    value = metrics.REGISTRY.get_sample_value("jobwarden_schedule_slots_missed_total",
                                              {"schedule": name})
    return value or 0.0


def test_upsert_stores_a_definition_and_get_and_list_read_it_back(client: Client) -> None:
    record = client.schedules.upsert(
        "report", cron="30 2 * * mon-fri", timezone="Europe/Berlin", job_class=JOB,
        data={"k": [1, 2]}, queue="reports", priority=5, timeout_seconds=60, max_retries=2,
        catch_up="all", catch_up_window_seconds=7200, catch_up_max=3, overlap="forbid",
        source="cli", now=T0)

    assert record == client.schedules.get("report")
    assert [r.name for r in client.schedules.list()] == ["report"]
    assert (record.cron, record.interval, record.timezone) == (
        "30 2 * * MON-FRI", None, "Europe/Berlin")
    assert record.expression == "CRON_TZ=Europe/Berlin 30 2 * * MON-FRI"
    assert (record.job_class, record.data, record.queue, record.priority) == (
        JOB, {"k": [1, 2]}, "reports", 5)
    assert (record.timeout_seconds, record.max_retries) == (60.0, 2)
    assert (record.catch_up, record.catch_up_window_seconds, record.catch_up_max) == (
        "all", 7200, 3)
    assert (record.overlap, record.source, record.suspended) == ("Forbid", "cli", False)
    # A new schedule starts from now: nothing before it is history.
    assert record.planned_until == T0
    assert (record.last_slot, record.enqueued_count, record.missed_count) == (None, 0, 0)
    # Tuesday 8 January 2030, 02:30 in Berlin (CET, UTC+1).
    assert record.next_slot == dt.datetime(2030, 1, 8, 1, 30, tzinfo=dt.UTC)


def test_interval_records_read_back_in_canonical_spelling(client: Client) -> None:
    record = client.schedules.upsert("sync", interval="90m", job_class=JOB, now=T0)
    assert (record.interval, record.cron, record.timezone, record.expression) == (
        "1h30m", None, "UTC", "@every 1h30m")
    assert record.next_slot == dt.datetime(2030, 1, 7, 13, 30, tzinfo=dt.UTC)


def test_a_job_class_given_as_a_class_fills_unset_fields_from_it(client: Client) -> None:
    record = client.schedules.upsert("nightly", cron="@daily", job_class=schedulejobs.Nightly,
                                     queue=None, priority=None)
    assert record.job_class == "tests.support.schedulejobs:Nightly"
    assert (record.queue, record.timeout_seconds, record.max_retries) == ("reports", 900.0, 1)


BAD_INPUT: list[tuple[dict[str, Any], str]] = [
    ({"cron": "61 * * * *"}, "minute"),
    ({"cron": "* 24 * * *"}, "hour"),
    ({"cron": "* * 32 * *"}, "day-of-month"),
    ({"cron": "* * * 13 *"}, "month"),
    ({"cron": "* * * * 8"}, "day-of-week"),
    ({"cron": "* * * FOO *"}, "month"),
    ({"cron": "*/10 * * * * *"}, "seconds"),
    ({"cron": "0 0 12 * * ?"}, "Quartz"),
    ({"cron": "0 0 L * *"}, "L"),
    ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
    ({"interval": "0s"}, "zero"),
    ({"interval": "-5m"}, "negative"),
    ({"interval": "5"}, "unit"),
    ({"interval": "5m", "cron": "* * * * *"}, "exactly one"),
    ({}, "exactly one"),
    ({"interval": "5m", "catch_up_window_seconds": 59}, "at least 60"),
    ({"interval": "5m", "catch_up": "some"}, "catch-up"),
    ({"interval": "5m", "catch_up_max": 0}, "catch-up max"),
    ({"interval": "5m", "overlap": "Sometimes"}, "overlap"),
    ({"interval": "5m", "job_class": "no-colon"}, "package.module:Name"),
    ({"interval": "5m", "data": {"x": float("nan")}}, "JSON"),
    ({"interval": "5m", "data": {"x": object()}}, "JSON"),
    ({"interval": "5m", "timeout_seconds": 0}, "timeout"),
    ({"interval": "5m", "max_retries": -1}, "max_retries"),
    ({"interval": "5m", "queue": " "}, "queue"),
    ({"interval": "5m", "priority": "high"}, "priority"),
]


@pytest.mark.parametrize("options,message", BAD_INPUT)
def test_bad_input_is_refused_with_an_error_naming_the_schedule_and_the_fault(
        options: dict[str, Any], message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate("bad", **{"job_class": JOB, **options})
    assert message in str(caught.value)
    assert "'bad'" in str(caught.value)


def test_bad_input_stores_nothing(client: Client) -> None:
    for options, _ in BAD_INPUT:
        with pytest.raises(ScheduleError):
            client.schedules.upsert("bad", **{"job_class": JOB, **options})
    assert client.schedules.list() == []


@pytest.mark.parametrize("name", ["", " x", "with space", "x" * 321, "-leading"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ScheduleError):
        validate(name, interval="5m", job_class=JOB)


def test_a_bad_change_leaves_the_stored_definition_as_it_was(client: Client) -> None:
    before = client.schedules.upsert("report", interval="5m", job_class=JOB, now=T0)
    with pytest.raises(ScheduleError):
        client.schedules.upsert("report", cron="0 0 30 2 *", job_class=JOB)
    assert client.schedules.get("report") == before


def test_a_kubernetes_style_name_is_accepted_and_long_ones_are_fine_up_to_320(
        client: Client) -> None:
    name = "team-a/" + "n" * 300
    record = client.schedules.upsert(name, interval="5m", job_class=JOB)
    assert record.name == name


def test_spec_hash_is_stable_and_changes_only_with_the_definition(client: Client) -> None:
    first = client.schedules.upsert("h", interval="5m", job_class=JOB, data={"a": 1, "b": 2})
    again = client.schedules.upsert("h", interval="300s", job_class=JOB, data={"b": 2, "a": 1},
                                     source="kubernetes")
    assert again.spec_hash == first.spec_hash  # same definition, other spelling and writer
    assert client.schedules.spec_hash(interval="5m", job_class=JOB, data={"a": 1, "b": 2},
                                      source="elsewhere") == first.spec_hash
    changed = client.schedules.upsert("h", interval="5m", job_class=JOB, data={"a": 2})
    assert changed.spec_hash != first.spec_hash
    assert validate("other", interval="5m", job_class=JOB, data={"a": 2}, queue="default",
                    priority=0).spec_hash == changed.spec_hash


def test_slot_keys_are_the_name_and_the_slot_in_utc_iso_8601() -> None:
    berlin = dt.datetime(2030, 7, 1, 5, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert slot_key("ns/report", berlin) == "ns/report:2030-07-01T03:00:00Z"


def test_delete_removes_the_row_and_says_whether_there_was_one(client: Client) -> None:
    client.schedules.upsert("gone", interval="5m", job_class=JOB)
    assert client.schedules.delete("gone") is True
    assert client.schedules.get("gone") is None
    assert client.schedules.delete("gone") is False


def test_slots_passed_while_suspended_are_not_missed_and_resume_starts_from_now(
        client: Client) -> None:
    """Nobody wanted the slots of a pause run: counting them missed paged
    JobwardenScheduleSlotsMissed on every resume (issue 27)."""
    client.schedules.upsert("paused", interval="1m", job_class=JOB, now=T0)
    suspended = client.schedules.suspend("paused", now=T0)
    assert suspended is not None
    assert (suspended.suspended, suspended.suspended_by, suspended.next_slot) == (
        True, "manual", None)
    assert client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=30)).checked == 0

    before = _missed("paused")
    resumed = client.schedules.resume("paused", now=T0 + dt.timedelta(minutes=10, seconds=5))
    assert resumed is not None and not resumed.suspended
    assert resumed.missed_count == 0  # 12:01 .. 12:10 passed while suspended
    assert _missed("paused") - before == 0
    assert resumed.planned_until == T0 + dt.timedelta(minutes=10, seconds=5)
    assert resumed.next_slot == dt.datetime(2030, 1, 7, 12, 11, tzinfo=dt.UTC)
    # Nothing from the pause is run afterwards; the next slot is.
    report = client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=10, seconds=20))
    assert (report.checked, report.enqueued, report.missed) == (0, 0, 0)
    report = client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=10, seconds=40))
    assert (report.enqueued, report.missed) == (1, 0)


def test_a_manual_suspension_survives_a_reapply_of_the_definition_until_resume(
        client: Client) -> None:
    client.schedules.upsert("stuck", interval="1m", job_class=JOB, source="kubernetes")
    client.schedules.suspend("stuck")
    again = client.schedules.upsert("stuck", interval="1m", job_class=JOB, source="kubernetes")
    assert (again.suspended, again.suspended_by) == (True, "manual")
    resumed = client.schedules.resume("stuck")
    assert resumed is not None and not resumed.suspended


def test_a_definition_that_says_suspended_stays_suspended_through_resume(
        client: Client) -> None:
    record = client.schedules.upsert("off", interval="1m", job_class=JOB, suspended=True)
    assert (record.suspended, record.suspended_by) == (True, "spec")
    resumed = client.schedules.resume("off")
    assert resumed is not None and (resumed.suspended, resumed.suspended_by) == (True, "spec")
    on = client.schedules.upsert("off", interval="1m", job_class=JOB, suspended=False)
    assert not on.suspended


def test_changing_the_expression_starts_the_schedule_from_now(client: Client) -> None:
    client.schedules.upsert("c", cron="0 * * * *", job_class=JOB, now=T0)
    # 30 minutes later the schedule becomes minutely: the half hour before the change
    # never had minutely slots, so nothing is run or missed for it.
    changed_at = T0 + dt.timedelta(minutes=30)
    changed = client.schedules.upsert("c", cron="* * * * *", job_class=JOB, now=changed_at)
    assert changed.planned_until == changed_at
    assert changed.next_slot == dt.datetime(2030, 1, 7, 12, 31, tzinfo=dt.UTC)
    assert changed.missed_count == 0
    report = client.schedules.enqueue_due(now=changed_at + dt.timedelta(seconds=40))
    assert (report.enqueued, report.missed) == (1, 0)


def test_a_slot_that_came_due_while_the_last_pass_ran_is_due_now_and_an_older_one_waits(
        client: Client) -> None:
    """The operator's schedule loop asks, after a pass, how long until the next slot. A
    slot that came due after the pass began (the pass's snapshot could not see it) is due
    now: a negative figure. Before, it was left out as "not in the future" and the loop
    slept its whole check interval, missing the slots in between. A slot due before the
    pass began is one the pass failed to enqueue: it must not make the loop spin."""
    db = client.db
    client.schedules.upsert("hourly", interval="1h", job_class=JOB)
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedules "
                     "SET next_slot = clock_timestamp() - interval '0.3 seconds'")
        conn.commit()
    due = db.schedules.seconds_to_next_slot(recent=60.0)  # the pass began a minute ago
    assert due is not None and due < 0
    assert db.schedules.seconds_to_next_slot(recent=0.0) is None  # the pass began after it
    client.schedules.suspend("hourly")
    assert db.schedules.seconds_to_next_slot(recent=60.0) is None


def test_next_slots_lists_upcoming_runs_after_now(client: Client) -> None:
    client.schedules.upsert("n", interval="15m", job_class=JOB)
    after = dt.datetime(2030, 1, 1, 0, 7, tzinfo=dt.UTC)
    assert client.schedules.next_slots("n", count=3, after=after) == [
        dt.datetime(2030, 1, 1, 0, 15, tzinfo=dt.UTC),
        dt.datetime(2030, 1, 1, 0, 30, tzinfo=dt.UTC),
        dt.datetime(2030, 1, 1, 0, 45, tzinfo=dt.UTC),
    ]


def test_seconds_to_next_slot_is_the_earliest_future_slot_of_a_runnable_schedule(
        client: Client) -> None:
    """What the operator's schedule loop sleeps until (controller/periodic.py): the
    earliest next slot of an unsuspended schedule, on the database clock."""
    db = client.db
    assert db.schedules.seconds_to_next_slot() is None  # no schedule
    client.schedules.upsert("hourly", interval="1h", job_class=JOB)
    client.schedules.upsert("daily", interval="1d", job_class=JOB)
    hourly = client.schedules.get("hourly")
    assert hourly is not None and hourly.next_slot is not None
    first = db.schedules.seconds_to_next_slot()
    assert first is not None and 0 < first <= 3600
    client.schedules.suspend("hourly")
    later = db.schedules.seconds_to_next_slot()
    assert later is not None and 3600 < later <= 86400  # the daily one's
    client.schedules.suspend("daily")
    assert db.schedules.seconds_to_next_slot() is None
