"""Marking a job as a pod run: stored by every enqueue path, copied by the schedule
runner, and never claimed by a worker (docs/podruns.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable

import pytest

import jobwarden
from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.schedules import ScheduleError
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import wait_for

POD = "JobSchedule/team-a/nightly-export"
T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
JOB = "tests.support.schedulejobs:Tick"


def _pod_run_of(db: Database, job_id: int) -> str | None:
    with db.connection() as conn:
        row = conn.execute("SELECT pod_run FROM jobwarden.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("count", [1, 3, 40], ids=["one", "unnest", "copy"])
def test_every_enqueue_path_stores_the_pod_run(client: jobwarden.Client, db: Database,
                                              count: int) -> None:
    specs = [client.spec(testjobs.Record, {"n": n}, pod_run=POD) for n in range(count)]
    results = client.enqueue_specs(specs)
    assert [_pod_run_of(db, r.id) for r in results] == [POD] * count
    assert client.job(results[0].id).pod_run == POD


def test_a_pod_run_reference_is_checked_before_anything_is_stored(
        client: jobwarden.Client) -> None:
    for bad in ("nightly", "CronJob/ns/x", "JobSchedule/Team_A/x", "JobSchedule/a/" + "x" * 300,
                "JobSchedule/a/x\x00"):
        with pytest.raises(errors.InvalidInput, match="pod_run"):
            client.enqueue(testjobs.Record, {"n": 1}, pod_run=bad)
    assert client.jobs() == []


def test_no_worker_claim_variant_takes_a_pod_run(client: jobwarden.Client,
                                                 db: Database) -> None:
    pod = client.enqueue(testjobs.Record, {"n": 1}, pod_run=POD, priority=100).id
    pool = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(4)]
    db.hosts.register(host="capped", pool="default", code_version="", cap=10,
                      worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    claimed = [
        *db.jobs.claim(host="a", limit=1, grace_seconds=60),
        *db.jobs.claim(host="b", limit=1, grace_seconds=60, queues=["default"]),
        *db.jobs.claim(host="capped", limit=1, grace_seconds=60, host_cap=True),
        *db.jobs.claim(host="capped", limit=1, grace_seconds=60, host_cap=True,
                       queues=["default"]),
    ]
    assert sorted(c.id for c in claimed) == pool  # the higher-priority pod run was passed over
    record = client.job(pod)
    assert (record.status, record.attempts) == (JobStatus.PENDING, 0)


def test_a_running_worker_leaves_pod_runs_pending(client: jobwarden.Client,
                                                  start_worker: Callable[..., Worker]) -> None:
    pod = client.enqueue(testjobs.Record, {"n": 1}, pod_run=POD, priority=5).id
    pool = client.enqueue(testjobs.Record, {"n": 2}).id
    start_worker()
    wait_for(lambda: client.job(pool).status is JobStatus.COMPLETED, message="pool job done")
    record = client.job(pod)
    assert (record.status, record.attempts, record.claimed_by) == (JobStatus.PENDING, 0, None)


def test_the_schedule_runner_copies_the_pod_run_onto_every_slot(client: jobwarden.Client,
                                                                db: Database) -> None:
    client.schedules.upsert("nightly", interval="1m", job_class=JOB, pod_run=POD, now=T0)
    client.schedules.upsert("pool", interval="1m", job_class=JOB, now=T0)
    report = client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=1))
    assert report.enqueued == 2
    by_schedule = {j.schedule_name: j for j in client.jobs()}
    assert by_schedule["nightly"].pod_run == POD
    assert by_schedule["pool"].pod_run is None
    record = client.schedules.get("nightly")
    assert record is not None and record.pod_run == POD

    past = db.schedules.now() - dt.timedelta(minutes=5)
    backfill = client.schedules.backfill("nightly", start=past,
                                         end=past + dt.timedelta(minutes=2))
    assert backfill.enqueued >= 2
    run_now = client.schedules.run_now("nightly")
    for job_id in [*backfill.job_ids, run_now.job_id]:
        assert _pod_run_of(db, job_id) == POD


def test_the_pod_run_is_part_of_the_definition_hash(client: jobwarden.Client) -> None:
    pool = client.schedules.spec_hash(interval="1m", job_class=JOB)
    pod = client.schedules.spec_hash(interval="1m", job_class=JOB, pod_run=POD)
    other = client.schedules.spec_hash(interval="1m", job_class=JOB,
                                       pod_run="JobSchedule/team-b/nightly-export")
    assert len({pool, pod, other}) == 3

    client.schedules.upsert("nightly", interval="1m", job_class=JOB, now=T0)
    changed = client.schedules.upsert("nightly", interval="1m", job_class=JOB, pod_run=POD,
                                      now=T0)
    assert (changed.pod_run, changed.spec_hash) == (POD, pod)
    back = client.schedules.upsert("nightly", interval="1m", job_class=JOB, now=T0)
    assert (back.pod_run, back.spec_hash) == (None, pool)


def test_a_bad_schedule_pod_run_is_refused(client: jobwarden.Client) -> None:
    with pytest.raises(ScheduleError, match="pod_run"):
        client.schedules.upsert("nightly", interval="1m", job_class=JOB,
                                pod_run="Deployment/a/b")
    assert client.schedules.get("nightly") is None


def test_a_replaced_spec_keeps_its_pod_run(client: jobwarden.Client) -> None:
    spec = dataclasses.replace(client.spec(testjobs.Record, {"n": 1}), pod_run=POD)
    [result] = client.enqueue_specs([spec])
    assert client.job(result.id).pod_run == POD
