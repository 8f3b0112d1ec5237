"""The runner, ``enqueue_due``: one job per slot, catch-up after outages, overlap policies.

Outages are simulated by passing the runner's "now" (the database clock is the
default), so an hour of downtime costs nothing to test.
"""

from __future__ import annotations

import datetime as dt

from jobwarden.api.client import Client
from jobwarden.db.database import Database
from jobwarden.observability import metrics
from jobwarden.schedules import runner
from jobwarden.structs.jobs import Completion
from jobwarden.structs.schedules import RunReport
from jobwarden.structs.states import JobStatus

T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)  # schedules are created here
JOB = "tests.support.schedulejobs:Tick"


def at(hours: int = 0, minutes: int = 0, seconds: int = 0) -> dt.datetime:
    """An instant on 7 January 2030 (UTC)."""
    return dt.datetime(2030, 1, 7, hours, minutes, seconds, tzinfo=dt.UTC)


def keys(client: Client, name: str) -> list[str]:
    return sorted(j.unique_key or "" for j in client.jobs(limit=10_000)
                  if j.schedule_name == name)


def counted(metric: str, name: str) -> float:
    value = metrics.REGISTRY.get_sample_value(f"jobwarden_schedule_slots_{metric}_total",
                                              {"schedule": name})
    return value or 0.0


def fates(report: RunReport) -> tuple[int, int, int, int, int]:
    return (report.checked, report.enqueued, report.duplicates, report.skipped, report.missed)


def finish_all(db: Database) -> None:
    """Claim and complete every due job (a worker in two statements)."""
    claimed = db.jobs.claim(host="test", limit=1000, grace_seconds=60)
    db.jobs.complete_many([Completion(id=c.id, claim_token=c.claim_token, result=None)
                           for c in claimed])


def lease_options(db: Database, job_id: int) -> tuple[str | None, float | None]:
    with db.connection() as conn:
        row = conn.execute("SELECT on_busy, lease_ttl_seconds FROM jobwarden.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


# -- one job per slot ------------------------------------------------------------------


def test_each_slot_becomes_one_job_keyed_by_name_and_utc_slot(client: Client) -> None:
    client.schedules.upsert("tick", interval="1m", job_class=JOB, data={"x": 1}, queue="q",
                            priority=3, now=T0)

    report = client.schedules.enqueue_due(now=at(12, 1, 2))

    assert fates(report) == (1, 1, 0, 0, 0)
    [job] = client.jobs()
    assert job.unique_key == "tick:2030-01-07T12:01:00Z"
    assert (job.schedule_name, job.job_class, job.data, job.queue, job.priority) == (
        "tick", JOB, {"x": 1}, "q", 3)
    assert job.lease_name is None  # Allow: no overlap lease
    record = client.schedules.get("tick")
    assert record is not None
    assert (record.last_slot, record.next_slot, record.enqueued_count) == (
        at(12, 1), at(12, 2), 1)
    assert (record.last_job_id, record.last_job_status) == (job.id, "pending")


def test_a_pass_before_the_next_slot_checks_nothing_and_enqueues_nothing(
        client: Client) -> None:
    client.schedules.upsert("tick", interval="1m", job_class=JOB, now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 2))
    assert fates(client.schedules.enqueue_due(now=at(12, 1, 59))) == (0, 0, 0, 0, 0)
    assert keys(client, "tick") == ["tick:2030-01-07T12:01:00Z"]


def test_a_new_schedule_starts_from_now_with_nothing_run_or_missed_before_it(
        client: Client) -> None:
    client.schedules.upsert("fresh", interval="1m", job_class=JOB, now=T0)
    assert fates(client.schedules.enqueue_due(now=T0)) == (0, 0, 0, 0, 0)
    report = client.schedules.enqueue_due(now=at(12, 1, 0))
    assert fates(report) == (1, 1, 0, 0, 0)  # the first slot after creation, exactly on time
    record = client.schedules.get("fresh")
    assert record is not None and record.missed_count == 0


def test_a_slot_at_or_before_the_last_one_never_runs_again(client: Client, db: Database) -> None:
    client.schedules.upsert("once", interval="1m", job_class=JOB, now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 5))
    [job] = client.jobs()
    # Even with its job gone (purged), and with the clock going backwards, the slot
    # is never enqueued again: the schedule's planning point only moves forward.
    finish_all(db)
    assert client.purge(status="completed") == 1
    for now in (at(12, 1, 5), at(12, 1, 30), at(12, 0, 59)):
        assert client.schedules.enqueue_due(now=now).enqueued == 0
    assert client.jobs() == []
    assert client.schedules.enqueue_due(now=at(12, 2, 1)).enqueued == 1
    assert keys(client, "once") == ["once:2030-01-07T12:02:00Z"]
    assert job.unique_key == "once:2030-01-07T12:01:00Z"


def test_a_slot_whose_job_already_exists_is_a_duplicate_not_a_second_job(
        client: Client) -> None:
    client.schedules.upsert("dup", interval="1m", job_class=JOB, now=T0)
    existing = client.enqueue(JOB, unique_key="dup:2030-01-07T12:01:00Z")
    report = client.schedules.enqueue_due(now=at(12, 1, 5))
    assert fates(report) == (1, 0, 1, 0, 0)
    record = client.schedules.get("dup")
    assert record is not None and record.last_job_id == existing.id
    assert record.enqueued_count == 0


# -- catch-up after an outage -------------------------------------------------------------


def test_catch_up_latest_runs_the_newest_missed_slot_and_counts_the_rest_missed(
        client: Client) -> None:
    client.schedules.upsert("latest", interval="1m", job_class=JOB, now=T0)
    before = counted("missed", "latest")

    report = client.schedules.enqueue_due(now=at(15, 0, 10))  # three hours down

    assert fates(report) == (1, 1, 0, 0, 179)  # 12:01 .. 15:00 is 180 slots
    assert keys(client, "latest") == ["latest:2030-01-07T15:00:00Z"]
    record = client.schedules.get("latest")
    assert record is not None
    assert (record.missed_count, record.enqueued_count, record.last_slot) == (
        179, 1, at(15))
    assert counted("missed", "latest") - before == 179


def test_catch_up_latest_runs_nothing_when_the_newest_slot_is_older_than_the_window(
        client: Client) -> None:
    client.schedules.upsert("hourly", cron="0 * * * *", job_class=JOB,
                            catch_up_window_seconds=600, now=T0)
    report = client.schedules.enqueue_due(now=at(14, 30))
    assert fates(report) == (1, 0, 0, 0, 2)  # 13:00 and 14:00, both > 10 minutes old
    record = client.schedules.get("hourly")
    assert record is not None and (record.last_slot, record.next_slot) == (at(14), at(15))


def test_catch_up_none_runs_only_a_current_slot(client: Client) -> None:
    client.schedules.upsert("none", interval="1m", job_class=JOB, catch_up="none", now=T0)
    report = client.schedules.enqueue_due(now=at(15, 0, 10))
    assert fates(report) == (1, 1, 0, 0, 179)  # 15:00 is current (10 s late)
    client.schedules.upsert("none-hourly", cron="0 * * * *", job_class=JOB, catch_up="none",
                            now=T0)
    report = client.schedules.enqueue_due(now=at(14, 0, 30) + dt.timedelta(minutes=5))
    assert fates(report) == (1, 0, 0, 0, 2)
    record = client.schedules.get("none-hourly")
    assert record is not None and (record.enqueued_count, record.missed_count) == (0, 2)


def test_catch_up_all_runs_every_missed_slot_in_the_window_up_to_the_cap(
        client: Client) -> None:
    client.schedules.upsert("capped", interval="1m", job_class=JOB, catch_up="all",
                            catch_up_max=5, now=T0)
    client.schedules.upsert("windowed", interval="1m", job_class=JOB, catch_up="all",
                            catch_up_max=100, catch_up_window_seconds=600, now=T0)

    report = client.schedules.enqueue_due(now=at(15, 0, 10))

    assert (report.checked, report.enqueued, report.missed) == (2, 5 + 10, 175 + 170)
    assert keys(client, "capped") == [f"capped:2030-01-07T14:{m}:00Z" for m in range(56, 60)] \
        + ["capped:2030-01-07T15:00:00Z"]
    windowed = keys(client, "windowed")
    assert windowed[0] == "windowed:2030-01-07T14:51:00Z" and len(windowed) == 10
    capped = client.schedules.get("capped")
    assert capped is not None and (capped.enqueued_count, capped.missed_count) == (5, 175)


def test_every_slot_gets_exactly_one_fate_across_passes(client: Client) -> None:
    client.schedules.upsert("fate", interval="1m", job_class=JOB, catch_up="all",
                            catch_up_max=3, now=T0)
    for now in (at(12, 10, 1), at(12, 10, 2), at(12, 11, 0), at(12, 40, 0), at(13, 0, 0)):
        client.schedules.enqueue_due(now=now)
    record = client.schedules.get("fate")
    assert record is not None
    assert record.enqueued_count + record.missed_count + record.skipped_count == 60
    assert record.enqueued_count == len(keys(client, "fate"))


# -- overlap policies -----------------------------------------------------------------------


def test_forbid_skips_and_counts_slots_while_the_previous_run_is_pending_or_running(
        client: Client, db: Database) -> None:
    client.schedules.upsert("forbid", interval="1m", job_class=JOB, overlap="Forbid", now=T0)
    skipped_before = counted("skipped", "forbid")

    assert client.schedules.enqueue_due(now=at(12, 1, 1)).enqueued == 1
    [first] = client.jobs()
    assert first.lease_name == "schedule:forbid"
    assert lease_options(db, first.id) == ("skip", None)  # a busy lease drops the run

    assert fates(client.schedules.enqueue_due(now=at(12, 2, 1))) == (1, 0, 0, 1, 0)  # pending
    claimed = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert [c.id for c in claimed] == [first.id]
    assert fates(client.schedules.enqueue_due(now=at(12, 3, 1))) == (1, 0, 0, 1, 0)  # running

    db.jobs.complete_many([Completion(id=first.id, claim_token=claimed[0].claim_token,
                                      result=None)])
    assert client.schedules.enqueue_due(now=at(12, 4, 1)).enqueued == 1
    assert keys(client, "forbid") == ["forbid:2030-01-07T12:01:00Z",
                                      "forbid:2030-01-07T12:04:00Z"]
    record = client.schedules.get("forbid")
    assert record is not None and (record.skipped_count, record.enqueued_count) == (2, 2)
    assert counted("skipped", "forbid") - skipped_before == 2


def test_forbid_with_catch_up_all_enqueues_only_the_oldest_runnable_slot(
        client: Client) -> None:
    client.schedules.upsert("forbid-all", interval="1m", job_class=JOB, overlap="Forbid",
                            catch_up="all", catch_up_max=4, now=T0)
    report = client.schedules.enqueue_due(now=at(12, 10, 1))
    assert fates(report) == (1, 1, 0, 3, 6)
    assert keys(client, "forbid-all") == ["forbid-all:2030-01-07T12:07:00Z"]


def test_replace_cancels_a_pending_run_and_asks_a_running_one_to_stop(
        client: Client, db: Database) -> None:
    client.schedules.upsert("replace", interval="1m", job_class=JOB, overlap="Replace", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    [first] = client.jobs()

    report = client.schedules.enqueue_due(now=at(12, 2, 1))
    assert (report.enqueued, report.replaced) == (1, 1)
    assert client.job(first.id).status is JobStatus.CANCELLED
    second = next(j for j in client.jobs() if j.id != first.id)
    assert second.unique_key == "replace:2030-01-07T12:02:00Z"
    assert second.lease_name == "schedule:replace"
    assert lease_options(db, second.id) == ("defer", None)  # waits for the old run to stop

    [claim] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert claim.id == second.id
    report = client.schedules.enqueue_due(now=at(12, 3, 1))
    assert (report.enqueued, report.replaced) == (1, 1)
    running = client.job(second.id)
    assert (running.status, running.cancel_requested) == (JobStatus.PROCESSING, True)
    ack = db.jobs.heartbeat_many([(claim.id, claim.claim_token)], grace_seconds=60)
    assert claim.id in ack.cancel_requested  # its next heartbeat() raises JobCancelled
    record = client.schedules.get("replace")
    assert record is not None and record.enqueued_count == 3


def test_replace_with_catch_up_all_enqueues_only_the_newest_slot(client: Client) -> None:
    client.schedules.upsert("replace-all", interval="1m", job_class=JOB, overlap="Replace",
                            catch_up="all", catch_up_max=4, now=T0)
    report = client.schedules.enqueue_due(now=at(12, 10, 1))
    assert fates(report) == (1, 1, 0, 3, 6)
    assert keys(client, "replace-all") == ["replace-all:2030-01-07T12:10:00Z"]


# -- robustness --------------------------------------------------------------------------------


def test_suspended_schedules_are_not_checked(client: Client) -> None:
    client.schedules.upsert("off", interval="1m", job_class=JOB, suspended=True, now=T0)
    assert fates(client.schedules.enqueue_due(now=at(13))) == (0, 0, 0, 0, 0)


def test_a_corrupt_row_is_counted_as_an_error_and_does_not_stop_the_others(
        client: Client, db: Database) -> None:
    client.schedules.upsert("good", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("broken", interval="1m", job_class=JOB, now=T0)
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedules SET expression = 'gibberish' "
                     "WHERE name = 'broken'")

    report = client.schedules.enqueue_due(now=at(12, 1, 1))

    assert (report.checked, report.enqueued, report.errors) == (2, 1, 1)
    broken = client.schedules.get("broken")
    assert broken is not None and broken.last_error and "gibberish" in broken.last_error
    assert broken.next_slot is not None and broken.next_slot > at(12, 1, 1)


def test_the_runner_never_raises_even_without_its_table(db: Database) -> None:
    with db.connection() as conn:
        conn.execute("DROP TABLE jobwarden.schedules CASCADE")
    report = runner.enqueue_due(db)
    assert report.errors == 1 and report.enqueued == 0


def test_a_limit_stops_the_pass_and_says_more_is_due(client: Client) -> None:
    for n in range(5):
        client.schedules.upsert(f"s{n}", interval="1m", job_class=JOB, now=T0)
    first = runner.enqueue_due(client.db, now=at(12, 1, 1), limit=3, batch_size=2)
    assert (first.checked, first.enqueued, first.more) == (3, 3, True)
    second = runner.enqueue_due(client.db, now=at(12, 1, 1), limit=3, batch_size=2)
    assert (second.checked, second.enqueued, second.more) == (2, 2, False)


def test_health_reports_seconds_since_success_and_lag(client: Client, db: Database) -> None:
    now = db.now()
    client.schedules.upsert("done", interval="1m", job_class=JOB)
    assert runner.enqueue_due(db, now=now + dt.timedelta(seconds=61)).enqueued == 1
    finish_all(db)
    # Created ten minutes "ago" and never planned since: its next slot is ~9 minutes late.
    client.schedules.upsert("late", interval="1m", job_class=JOB,
                            now=now - dt.timedelta(minutes=10))

    health = {h.name: h for h in client.schedules.health()}

    assert health["done"].ever_succeeded
    assert 0 <= health["done"].seconds_since_success < 60
    assert health["done"].lag_seconds == 0
    assert not health["late"].ever_succeeded
    assert health["late"].lag_seconds > 8 * 60
    record = client.schedules.get("done")
    assert record is not None and record.last_success_at is not None
    assert record.last_job_status == "completed"


def test_schedules_sharing_an_expression_are_planned_each_from_its_own_state(
        client: Client) -> None:
    """One pass plans a (expression, planning point, catch-up) combination once and
    reuses it; schedules that share the expression but not the rest still get their
    own slots and fates."""
    for name in ("a1", "a2"):  # identical: created together, one plan for both
        client.schedules.upsert(name, cron="*/5 * * * *", job_class=JOB, catch_up="all",
                                now=T0)
    client.schedules.upsert("late", cron="*/5 * * * *", job_class=JOB, catch_up="all",
                            now=at(12, 10, 30))
    client.schedules.upsert("latest", cron="*/5 * * * *", job_class=JOB, catch_up="latest",
                            now=T0)
    client.schedules.upsert("capped", cron="*/5 * * * *", job_class=JOB, catch_up="all",
                            catch_up_max=2, now=T0)

    report = client.schedules.enqueue_due(now=at(12, 20, 1))

    four = [f"2030-01-07T12:{m:02d}:00Z" for m in (5, 10, 15, 20)]
    assert keys(client, "a1") == [f"a1:{s}" for s in four]
    assert keys(client, "a2") == [f"a2:{s}" for s in four]
    assert keys(client, "late") == [f"late:{s}" for s in four[2:]]
    assert keys(client, "latest") == [f"latest:{four[-1]}"]
    assert keys(client, "capped") == [f"capped:{s}" for s in four[2:]]
    assert (report.checked, report.enqueued, report.missed) == (5, 13, 5)
