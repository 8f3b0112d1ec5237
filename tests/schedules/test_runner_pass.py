"""The runner's pass on the wire (db/runnerpass.py): what its shortcuts must not change.

A pass copies its jobs with one COPY, finds their ids by unique key, reads each
schedule's payload as JSON text and writes it back untouched, writes the rows
back by the tuple ids its claim locked, and redoes itself with an
``INSERT ... ON CONFLICT`` when a slot's job already exists. Each test here
fails if one of those shortcuts loses a guarantee: one job per slot, duplicates
counted (not enqueued), fates counted once by the statement that decided them,
the payload and the pod run copied exactly, one bad slot never costing the
other schedules of the pass.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.db import runnerpass
from jobwarden.db.database import Database
from jobwarden.observability import metrics
from jobwarden.schedules import expressions, runner
from jobwarden.structs.states import JobStatus
from tests.support.waiting import wait_for

T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)  # schedules are created here
JOB = "tests.support.schedulejobs:Tick"


def at(hours: int = 0, minutes: int = 0, seconds: int = 0) -> dt.datetime:
    return dt.datetime(2030, 1, 7, hours, minutes, seconds, tzinfo=dt.UTC)


def enqueued_metric(name: str) -> float:
    return metrics.REGISTRY.get_sample_value("jobwarden_schedule_slots_enqueued_total",
                                             {"schedule": name}) or 0.0


def keys_of(client: Client, name: str) -> list[str]:
    """The unique keys of the jobs of the schedule's slots (a backfilled one included)."""
    return sorted(j.unique_key for j in client.jobs(limit=1000)
                  if j.unique_key and j.unique_key.startswith(f"{name}:"))


def test_an_existing_slot_job_redoes_the_pass_and_costs_the_others_nothing(
        client: Client, db: Database, monkeypatch: Any) -> None:
    """A backfilled slot fails the pass's COPY; the redo inserts every other slot once,
    counts the duplicate, names the existing job in its fate, and moves the counters
    (and the Replace cancellation) once, not once per attempt."""
    for n in range(6):
        client.schedules.upsert(f"s{n}", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("swap", interval="1m", job_class=JOB, overlap="Replace", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    [previous] = [j for j in client.jobs(limit=100) if j.schedule_name == "swap"]
    existing = client.enqueue(JOB, unique_key="s3:2030-01-07T12:02:00Z")
    before = {f"s{n}": enqueued_metric(f"s{n}") for n in range(6)}
    attempts: list[bool] = []
    original = runner._attempt

    def attempt(*args: Any, **kwargs: Any) -> Any:
        attempts.append(kwargs["copy"])
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "_attempt", attempt)

    report = client.schedules.enqueue_due(now=at(12, 2, 1))

    assert attempts == [True, False]  # the COPY met the slot's job; the redo did not
    assert (report.checked, report.enqueued, report.duplicates, report.replaced) == (7, 6, 1, 1)
    assert client.job(previous.id).status is JobStatus.CANCELLED
    for n in range(6):
        name = f"s{n}"
        assert keys_of(client, name) == [f"{name}:2030-01-07T12:01:00Z",
                                         f"{name}:2030-01-07T12:02:00Z"]
        record = client.schedules.get(name)
        assert record is not None
        assert record.enqueued_count == (1 if name == "s3" else 2)
        assert enqueued_metric(name) - before[name] == (0 if name == "s3" else 1)
        [newest, *_] = db.schedules.slots(name)
        assert (newest.slot, newest.fate) == (at(12, 2), "enqueued")
        assert newest.job_id == record.last_job_id
    s3 = client.schedules.get("s3")
    assert s3 is not None and s3.last_job_id == existing.id
    swap = client.schedules.get("swap")
    assert swap is not None and (swap.enqueued_count, swap.replaced_count) == (2, 1)
    assert [f.fate for f in db.schedules.slots("swap")] == ["enqueued", "replaced"]


def test_the_payload_and_the_pod_run_reach_each_job_exactly_as_stored(
        client: Client) -> None:
    """The pass never parses the payload: the stored JSON text is what the job gets."""
    data = {"text": "tab\there \"quoted\" \\ back, é ✓ 🙂", "nested": {"list": [1, 2.5, None,
            True]}, "big": 2**62, "tiny": 1e-300, "empty": {}, "": ""}
    client.schedules.upsert("payload", interval="1m", job_class=JOB, data=data,
                            catch_up="all", now=T0)
    client.schedules.upsert("pods", interval="1m", job_class=JOB, data=[1, "two"],
                            pod_run="JobSchedule/ns/pods", now=T0)
    report = client.schedules.enqueue_due(now=at(12, 3, 1))
    assert report.enqueued == 4  # three slots of "payload" (catch-up all), one of "pods"
    # The operator wakes the pod-run resources the pass enqueued for (controller/periodic).
    assert report.pod_runs == {"JobSchedule/ns/pods"}
    assert "pod_runs" not in report.as_json()
    jobs = client.jobs(limit=100)
    assert [j.data for j in jobs if j.schedule_name == "payload"] == [data] * 3
    [pods] = [j for j in jobs if j.schedule_name == "pods"]
    assert pods.data == [1, "two"]
    assert pods.pod_run == "JobSchedule/ns/pods"


def test_a_pass_that_would_leave_a_schedule_unadvanced_commits_nothing(
        client: Client, db: Database, monkeypatch: Any) -> None:
    """The write-back finds its rows by the tuple ids the claim locked; should one not
    be found, the pass fails before its COMMIT: no job without its advance."""
    client.schedules.upsert("kept", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("lost", interval="1m", job_class=JOB, now=T0)
    original = runnerpass.RunnerPass.claim

    def claim(self: runnerpass.RunnerPass, **kwargs: Any) -> Any:
        clock, due = original(self, **kwargs)
        return clock, [d._replace(ctid="(0,0)") if d.name == "lost" else d for d in due]

    monkeypatch.setattr(runnerpass.RunnerPass, "claim", claim)
    report = runner.enqueue_due(db, now=at(12, 1, 1))
    assert report.errors == 1 and report.enqueued == 0
    assert client.jobs() == []
    for name in ("kept", "lost"):
        record = client.schedules.get(name)
        assert record is not None and record.enqueued_count == 0
        assert record.next_slot == at(12, 1)


def test_any_text_survives_the_array_literals_of_the_write_back(
        client: Client, db: Database) -> None:
    """The write-back's arrays are literals built client-side: quotes, backslashes,
    braces, commas, NULL-like words and newlines in a value come back unchanged."""
    nasty = 'gib"ber\\ish, {x}, NULL\n\'q\''
    client.schedules.upsert("odd", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("fine", interval="1m", job_class=JOB, now=T0)
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedules SET expression = %s WHERE name = 'odd'",
                     (nasty,))
    report = client.schedules.enqueue_due(now=at(12, 1, 1))
    assert (report.enqueued, report.errors) == (1, 1)
    with pytest.raises(Exception) as raised:
        expressions.parse_stored(nasty)
    odd = client.schedules.get("odd")
    assert odd is not None
    assert odd.last_error == f"{type(raised.value).__name__}: {raised.value}"
    assert '"' in odd.last_error and "\\" in odd.last_error and "{x}" in odd.last_error


def test_deleting_a_schedule_deletes_the_history_a_running_pass_commits_meanwhile(
        client: Client, db: Database, dsn: str) -> None:
    """The history has no foreign key (migration 0016): deletion deletes it in a second
    statement, which must also see the slots of a pass that held the row meanwhile."""
    client.schedules.upsert("gone", interval="1m", job_class=JOB, now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    with psycopg.connect(dsn) as holder:  # a runner pass: the row locked, a slot added
        holder.execute("SELECT 1 FROM jobwarden.schedules WHERE name = 'gone' FOR UPDATE")
        holder.execute("INSERT INTO jobwarden.schedule_slots (schedule_name, slot, fate) "
                       "VALUES ('gone', %s, 'skipped')", (at(12, 2),))
        deleted: list[bool] = []
        deleting = threading.Thread(target=lambda: deleted.append(
            client.schedules.delete("gone")))
        deleting.start()
        wait_for(lambda: _waiting_on_a_lock(dsn), timeout=30,
                 message="the deletion never waited for the pass's row lock")
        holder.commit()
    deleting.join(timeout=30)
    assert deleted == [True]
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM jobwarden.schedule_slots "
                            "WHERE schedule_name = 'gone'").fetchone()
    assert left == (0,)


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock'").fetchone()
    return bool(row and row[0])


def test_the_job_ids_the_claim_draws_name_each_slots_job(client: Client) -> None:
    """The claim draws one job id per schedule and a catch-up pass draws the rest: the
    history and last_job_id must name the job each slot's unique key has, one slot or
    several, and a schedule that enqueues nothing names none."""
    client.schedules.upsert("one", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("many", interval="1m", job_class=JOB, catch_up="all", now=T0)
    client.schedules.upsert("busy", interval="1m", job_class=JOB, overlap="Forbid", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))  # busy's first run stays pending
    report = client.schedules.enqueue_due(now=at(12, 4, 1))  # many: 3 slots; one: latest
    assert report.enqueued == 1 + 3 and report.skipped == 1 and report.errors == 0
    by_key = {j.unique_key: j.id for j in client.jobs(limit=100)}
    for name in ("one", "many", "busy"):
        record = client.schedules.get(name)
        assert record is not None
        for fate in client.db.schedules.slots(name, limit=100):
            if fate.fate == "enqueued":
                key = f"{name}:{fate.slot.astimezone(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
                assert fate.job_id == by_key[key]
            else:
                assert fate.job_id is None
        newest = max(key for key in by_key if key and key.startswith(f"{name}:"))
        assert record.last_job_id == by_key[newest]
    assert len([k for k in by_key if k and k.startswith("many:")]) == 4


def test_a_slot_with_a_history_row_redoes_the_pass_and_takes_the_newer_fate(
        client: Client, db: Database) -> None:
    """The history goes in by a plain insert; a slot that has a row already (its
    planning point moved back) fails it: the pass is rolled back and redone with the
    merging insert -- one job for the slot, its fate the new one naming that job, the
    counts and the metric moved once, and the other schedule of the pass untouched."""
    client.schedules.upsert("back", interval="1m", job_class=JOB, now=T0)
    client.schedules.upsert("other", interval="1m", job_class=JOB, now=T0)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.schedule_slots (schedule_name, slot, fate) "
                     "VALUES ('back', %s, 'missed')", (at(12, 1),))
    before = enqueued_metric("back")
    report = client.schedules.enqueue_due(now=at(12, 1, 1))
    assert report.enqueued == 2 and report.duplicates == 0 and report.errors == 0
    assert keys_of(client, "back") == ["back:2030-01-07T12:01:00Z"]
    assert keys_of(client, "other") == ["other:2030-01-07T12:01:00Z"]
    [job] = [j for j in client.jobs(limit=10) if j.schedule_name == "back"]
    [fate] = db.schedules.slots("back")
    assert (fate.slot, fate.fate, fate.job_id) == (at(12, 1), "enqueued", job.id)
    record = client.schedules.get("back")
    assert record is not None and record.enqueued_count == 1 and record.last_job_id == job.id
    assert enqueued_metric("back") == before + 1


def test_a_pass_of_several_batches_on_several_connections_claims_each_schedule_once(
        client: Client, db: Database) -> None:
    """Batches run on several connections at once (lanes): the pages are consecutive,
    the limit holds, every claimed schedule is enqueued once and advanced, and the
    rest is left for the next pass (``more``)."""
    names = [f"lane-{n:02d}" for n in range(45)]
    for name in names:
        client.schedules.upsert(name, interval="1m", job_class=JOB, now=T0)
    first = runner.enqueue_due(db, now=at(12, 1, 1), limit=40, batch_size=7, connections=3)
    assert (first.checked, first.enqueued, first.errors, first.more) == (40, 40, 0, True)
    second = runner.enqueue_due(db, now=at(12, 1, 1), limit=40, batch_size=7, connections=3)
    assert (second.checked, second.enqueued, second.errors, second.more) == (5, 5, 0, False)
    assert sorted(k for name in names for k in keys_of(client, name)) == sorted(
        f"{name}:2030-01-07T12:01:00Z" for name in names)
    for name in names:
        record = client.schedules.get(name)
        assert record is not None and record.enqueued_count == 1


def test_concurrent_passes_of_several_lanes_enqueue_one_job_per_slot(
        client: Client, db: Database) -> None:
    names = [f"race-{n:02d}" for n in range(60)]
    for name in names:
        client.schedules.upsert(name, interval="1m", job_class=JOB, now=T0)
    reports: list[Any] = []
    start = threading.Barrier(3)

    def run() -> None:
        start.wait()
        reports.append(runner.enqueue_due(db, now=at(12, 1, 1), limit=100, batch_size=4,
                                          connections=2))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(r.enqueued for r in reports) == 60
    assert sum(r.errors + r.duplicates for r in reports) == 0
    assert sorted(k for name in names for k in keys_of(client, name)) == sorted(
        f"{name}:2030-01-07T12:01:00Z" for name in names)


def test_a_failed_batch_commits_nothing_and_stops_the_other_lanes_after_theirs(
        client: Client, db: Database, monkeypatch: Any) -> None:
    """One batch fails at its write-back: it commits nothing, the other lane stops
    after its batch, and the report counts exactly what the committed batches did."""
    names = [f"fail-{n:02d}" for n in range(30)]
    for name in names:
        client.schedules.upsert(name, interval="1m", job_class=JOB, now=T0)
    real = runnerpass.RunnerPass.finish
    calls: list[int] = []
    guard = threading.Lock()

    def finish(self: runnerpass.RunnerPass, *args: Any, **kwargs: Any) -> None:
        with guard:
            calls.append(1)
            failing = len(calls) == 2
        if failing:
            raise RuntimeError("the write-back failed")
        real(self, *args, **kwargs)

    monkeypatch.setattr(runnerpass.RunnerPass, "finish", finish)
    report = runner.enqueue_due(db, now=at(12, 1, 1), limit=30, batch_size=5, connections=2)
    assert report.errors == 1
    jobs = [k for name in names for k in keys_of(client, name)]
    assert report.enqueued == len(jobs) and 0 < len(jobs) < 30
    assert len(calls) < 6  # not every batch ran
    for name in names:
        record = client.schedules.get(name)
        assert record is not None
        assert record.enqueued_count == len(keys_of(client, name))
