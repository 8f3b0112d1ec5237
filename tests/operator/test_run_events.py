"""Per-run Events of a JobSchedule (jobschedules/runevents.py), pure: what one pass tells,
how a fast schedule's runs are aggregated, and that nothing is told twice."""

from __future__ import annotations

import datetime as dt

from jobwarden.controller.jobschedules.runevents import MIN_INTERVAL, Outcome, RunEvents, slot_of

WALL = dt.datetime(2030, 1, 8, 2, 0, tzinfo=dt.UTC)


def job(i: int, status: str, slot: str = "2030-01-08T02:00:00Z",
        error: str | None = None) -> Outcome:
    return Outcome(id=i, status=status, unique_key=f"ns/report:{slot}", error=error)


def told(events: list) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in events]


def test_an_hourly_schedule_gets_an_event_per_run():
    runs = RunEvents()
    # First sight: the baseline (job 7 finished before), nothing told.
    assert runs.observe("u", enqueued=3, skipped=0, missed=0, outcomes=[job(7, "completed")],
                        overlap="Allow", catch_up="latest", now=0.0, wall=WALL) == []
    assert runs.floor("u", last_job_id=7) == 8
    events = runs.observe("u", enqueued=4, skipped=0, missed=0,
                          outcomes=[job(8, "pending", "2030-01-08T03:00:00Z")],
                          overlap="Allow", catch_up="latest", now=3600.0, wall=WALL)
    assert told(events) == [("Normal", "SuccessfulCreate",
                             "enqueued job 8 (slot 2030-01-08T03:00:00Z)")]
    assert runs.floor("u", last_job_id=8) == 8  # still active: read again
    events = runs.observe("u", enqueued=4, skipped=0, missed=0,
                          outcomes=[job(8, "failed", "2030-01-08T03:00:00Z", "boom")],
                          overlap="Allow", catch_up="latest", now=3605.0, wall=WALL)
    assert told(events) == [("Warning", "JobFailed",
                             "job 8 (slot 2030-01-08T03:00:00Z) failed: boom")]
    # Read again (the floor moved past it): never told twice.
    assert runs.observe("u", enqueued=4, skipped=0, missed=0,
                        outcomes=[job(8, "failed")], overlap="Allow",
                        catch_up="latest", now=3610.0, wall=WALL) == []
    assert runs.floor("u", last_job_id=8) == 9


def test_a_fast_schedule_is_aggregated_to_one_event_per_reason_and_interval():
    runs = RunEvents()
    runs.observe("u", enqueued=0, skipped=0, missed=0, outcomes=[], overlap="Forbid",
                 catch_up="none", now=0.0, wall=WALL)
    posted = []
    for second in range(1, 120):
        posted += runs.observe(
            "u", enqueued=second, skipped=second // 2, missed=0,
            outcomes=[job(second, "completed", f"2030-01-08T02:{second // 60:02d}:"
                                               f"{second % 60:02d}Z")],
            overlap="Forbid", catch_up="none", now=float(second),
            wall=WALL + dt.timedelta(seconds=second))
    reasons = [e.reason for e in posted]
    # First occurrence at once, the next ones together after MIN_INTERVAL (60 s).
    assert MIN_INTERVAL == 60.0
    assert reasons.count("SuccessfulCreate") == 2
    assert reasons.count("SawCompletedJob") == 2
    assert reasons.count("JobAlreadyActive") == 2
    second_create = [e for e in posted if e.reason == "SuccessfulCreate"][1]
    assert second_create.message.startswith("enqueued 60 jobs since 2030-01-08T02:00:02Z, "
                                            "newest job 61")
    skipped = next(e for e in posted if e.reason == "JobAlreadyActive")
    assert "concurrencyPolicy Forbid" in skipped.message


def test_missed_slots_are_a_warning():
    runs = RunEvents()
    runs.observe("u", enqueued=1, skipped=0, missed=0, outcomes=[], overlap="Allow",
                 catch_up="latest", now=0.0, wall=WALL)
    events = runs.observe("u", enqueued=1, skipped=0, missed=5, outcomes=[],
                          overlap="Allow", catch_up="latest", now=1.0, wall=WALL)
    assert [(e.type, e.reason) for e in events] == [("Warning", "MissSchedule")]
    assert events[0].message.startswith("5 slot(s) missed since 2030-01-08T02:00:00Z")


def test_an_idle_schedule_reads_no_jobs():
    runs = RunEvents()
    assert runs.needs_read("u", enqueued=1, active=False)  # first sight
    runs.observe("u", enqueued=1, skipped=0, missed=0, outcomes=[job(1, "completed")],
                 overlap="Allow", catch_up="latest", now=0.0, wall=WALL)
    assert not runs.needs_read("u", enqueued=1, active=False)
    assert runs.needs_read("u", enqueued=2, active=False)
    assert runs.needs_read("u", enqueued=1, active=True)


def test_the_slot_is_read_from_the_unique_key():
    assert slot_of("tenant@eu:report:2030-01-08T02:00:00Z") == "2030-01-08T02:00:00Z"
    assert slot_of("ns/x:run-now:abc") == ""
    assert slot_of(None) == ""


def test_a_failure_is_told_by_its_exception_line():
    runs = RunEvents()
    runs.observe("u", enqueued=0, skipped=0, missed=0, outcomes=[], overlap="Allow",
                 catch_up="latest", now=0.0, wall=WALL)
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n'
    events = runs.observe("u", enqueued=1, skipped=0, missed=0,
                          outcomes=[job(1, "failed", error=trace)], overlap="Allow",
                          catch_up="latest", now=1.0, wall=WALL)
    failed = [e for e in events if e.reason == "JobFailed"]
    assert failed[0].message == "job 1 (slot 2030-01-08T02:00:00Z) failed: RuntimeError: boom"
