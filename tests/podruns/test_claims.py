"""claim_pod_runs: one claim per row across claimants, leases taken at claim, and a busy
lease treated exactly as a worker treats it (docs/podruns.md)."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest

import jobwarden
from jobwarden import errors, podruns
from jobwarden.db.database import Database
from jobwarden.structs.states import JobStatus
from tests.podruns.support import CLAIMANT, POD, counter, enqueue_pod_run, hold_lease, row
from tests.support import testjobs

JOB = "tests.support.testjobs:Record"


def test_concurrent_claimants_claim_each_row_exactly_once(client: jobwarden.Client,
                                                          db: Database) -> None:
    ids = {enqueue_pod_run(client, {"n": n}) for n in range(24)}
    barrier = threading.Barrier(4)
    got: list[list[podruns.PodRunClaim]] = []
    lock = threading.Lock()

    def claimant(n: int) -> None:
        barrier.wait()
        batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=f"op-{n}",
                                       start_deadline=60, limit=10)
        with lock:
            got.append(batch.claims)

    threads = [threading.Thread(target=claimant, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [c.job_id for claims in got for c in claims]
    assert len(claimed) == len(set(claimed)) == 24
    assert set(claimed) == ids
    for claims in got:
        for claim in claims:
            status, attempts, token, heartbeat = row(db, claim.job_id, "status::text",
                                                     "attempts", "claim_token::text",
                                                     "heartbeat_at")
            assert (status, attempts, token, heartbeat) == ("processing", 1, claim.claim_token,
                                                            None)
            assert claim.attempt == 1 and claim.pod_run == POD and claim.lease_name is None


def test_only_due_rows_of_the_named_resources_are_claimed(client: jobwarden.Client,
                                                          db: Database) -> None:
    mine = enqueue_pod_run(client)
    other = enqueue_pod_run(client, pod_run="JobSchedule/team-b/nightly")
    later = client.enqueue_specs([client.spec(testjobs.Record, {"n": 2}, pod_run=POD,
                                              delay=3600)])[0].id
    pool = client.enqueue(testjobs.Record, {"n": 3}).id
    batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                   limit=10)
    assert [c.job_id for c in batch.claims] == [mine]
    for job_id in (other, later, pool):
        assert client.job(job_id).status is JobStatus.PENDING
    claimed_by, expires_in = row(db, mine, "claimed_by",
                                 "extract(epoch FROM claim_expires_at - now())")
    assert claimed_by == CLAIMANT
    assert 20 < expires_in <= 30  # the start deadline, not the heartbeat grace


def test_a_paused_queue_holds_its_pod_runs_back(client: jobwarden.Client, db: Database) -> None:
    job_id = enqueue_pod_run(client)
    client.pause_queue("default")
    assert podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                  limit=10).claims == []
    client.resume_queue("default")
    [claim] = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                     limit=10).claims
    assert claim.job_id == job_id


def test_a_schedule_run_names_its_slot(client: jobwarden.Client, db: Database) -> None:
    at = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
    pod = "JobSchedule/team-a/nightly"
    client.schedules.upsert("team-a/nightly", interval="1m", job_class=JOB, pod_run=pod, now=at)
    client.schedules.enqueue_due(now=at + dt.timedelta(minutes=1))
    # The slot's run is due in 2030: make it due now without touching anything else.
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now()")
    [claim] = podruns.claim_pod_runs(db, pod_runs=[pod], claimant=CLAIMANT, start_deadline=30,
                                     limit=1).claims
    assert claim.schedule_name == "team-a/nightly"
    assert claim.slot == dt.datetime(2030, 1, 7, 12, 1, tzinfo=dt.UTC)


def test_the_rows_lease_is_taken_at_claim_owned_by_the_claim(client: jobwarden.Client,
                                                             db: Database) -> None:
    job_id = enqueue_pod_run(client, lease_name="key:migrate", on_busy="defer", timeout=30.0)
    [claim] = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=100,
                                     limit=5).claims
    assert (claim.job_id, claim.lease_name) == (job_id, "key:migrate")
    [lease] = db.leases.read("key:migrate")
    assert lease.owner == claim.claim_token and lease.token == claim.lease_token
    assert client.job(job_id).lease_token == claim.lease_token
    # Window (30 + 60) plus the start deadline: nothing renews it before the pod runs.
    assert lease.expires_in_seconds is not None and 150 < lease.expires_in_seconds <= 190


def test_a_busy_lease_defers_without_a_pod_or_an_attempt(client: jobwarden.Client,
                                                         db: Database) -> None:
    job_id = enqueue_pod_run(client, lease_name="key:busy-defer", on_busy="defer")
    hold_lease(db, "key:busy-defer", ttl=20)
    labels = {"queue": "default", "job_class": JOB}
    before = (counter("jobwarden_jobs_deferred_total", **labels),
              counter("jobwarden_jobs_skipped_total", **labels, reason="lease_busy"),
              counter("jobwarden_lease_busy_total", kind="key"))

    batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                   limit=5)

    assert (batch.claims, batch.deferred, batch.skipped, batch.failed_busy) == ([], 1, 0, 0)
    status, attempts, deferrals, delay = row(db, job_id, "status::text", "attempts",
                                             "deferrals", "extract(epoch FROM run_at - now())")
    assert (status, attempts, deferrals) == ("pending", 0, 1)
    assert 0 < delay <= 20.5  # min(remaining lease, 30 s)
    after = (counter("jobwarden_jobs_deferred_total", **labels),
             counter("jobwarden_jobs_skipped_total", **labels, reason="lease_busy"),
             counter("jobwarden_lease_busy_total", kind="key"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]
    # Deferred again and again: never an attempt spent, never failed.
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now() WHERE id = %s", (job_id,))
    podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30, limit=5)
    assert row(db, job_id, "status::text", "attempts", "deferrals") == ("pending", 0, 2)


def test_a_busy_lease_with_on_busy_skip_drops_the_run(client: jobwarden.Client,
                                                      db: Database) -> None:
    job_id = enqueue_pod_run(client, lease_name="schedule:nightly", on_busy="skip")
    hold_lease(db, "schedule:nightly")
    labels = {"queue": "default", "job_class": JOB}
    skipped = counter("jobwarden_jobs_skipped_total", **labels, reason="on_busy_skip")

    batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                   limit=5)

    assert (batch.claims, batch.skipped) == ([], 1)
    record = client.job(job_id)
    assert record.status is JobStatus.CANCELLED
    assert record.last_error is not None and record.last_error.startswith(
        "skipped: lease 'schedule:nightly' busy")
    assert counter("jobwarden_jobs_skipped_total", **labels,
                   reason="on_busy_skip") == skipped + 1
    [attempt] = client.attempts(job_id)
    assert (attempt.outcome, attempt.status_after) == ("cancelled", "cancelled")


def test_a_busy_lease_with_on_busy_fail_is_a_failed_attempt(client: jobwarden.Client,
                                                            db: Database) -> None:
    job_id = enqueue_pod_run(client, lease_name="key:busy-fail", on_busy="fail")
    hold_lease(db, "key:busy-fail")
    labels = {"queue": "default", "job_class": JOB}
    retried = counter("jobwarden_jobs_retried_total", **labels, reason="lease_busy")

    batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=30,
                                   limit=5)

    assert (batch.claims, batch.failed_busy) == ([], 1)
    record = client.job(job_id)
    assert (record.status, record.attempts) == (JobStatus.PENDING, 1)
    assert record.last_error == (
        f"lease 'key:busy-fail' busy (held by {db.leases.read('key:busy-fail')[0].owner} "
        "on other-host)")
    assert counter("jobwarden_jobs_retried_total", **labels, reason="lease_busy") == retried + 1


@pytest.mark.parametrize("arguments", [
    {"pod_runs": ["Deployment/a/b"]},
    {"pod_runs": "ExclusiveJob/team-a/migrate-42"},
    {"claimant": " "},
    {"start_deadline": 0},
    {"start_deadline": float("nan")},
    {"limit": -1},
], ids=["kind", "string", "claimant", "deadline", "nan", "limit"])
def test_bad_arguments_are_refused_and_nothing_is_claimed(
        client: jobwarden.Client, db: Database, arguments: dict[str, object]) -> None:
    job_id = enqueue_pod_run(client)
    call: dict[str, object] = {"pod_runs": [POD], "claimant": CLAIMANT, "start_deadline": 30,
                               "limit": 5, **arguments}
    with pytest.raises(errors.InvalidInput):
        podruns.claim_pod_runs(db, **call)  # type: ignore[arg-type]
    assert row(db, job_id, "status::text", "attempts") == ("pending", 0)


def test_a_claim_whose_reply_was_lost_is_found_by_its_batch(client: jobwarden.Client,
                                                            db: Database) -> None:
    job_id = enqueue_pod_run(client)
    batch = uuid.uuid4()
    [taken] = db.podruns.claim(pod_runs=[POD], claimant=CLAIMANT, start_deadline=30, limit=5,
                               batch=batch)
    [found] = db.podruns.claims_of_batch(claimant=CLAIMANT, batch=batch)
    assert found.claim.id == taken.claim.id == job_id
    assert found.claim.claim_token == taken.claim.claim_token
    assert db.podruns.claims_of_batch(claimant=CLAIMANT, batch=uuid.uuid4()) == []


@pytest.mark.parametrize(("overlap", "policy", "fate"), [
    ("Forbid", "skip", "dropped"), ("Replace", "defer", "deferred"),
])
def test_a_busy_schedule_slot_gets_the_same_slot_fate_as_on_a_worker(
        client: jobwarden.Client, db: Database, overlap: str, policy: str, fate: str) -> None:
    at = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
    pod = "JobSchedule/team-a/nightly"
    client.schedules.upsert("nightly", interval="1m", job_class=JOB, pod_run=pod,
                            overlap=overlap, now=at)
    client.schedules.enqueue_due(now=at + dt.timedelta(minutes=1))
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now()")
    [job] = client.jobs()
    assert job.lease_name is not None
    hold_lease(db, job.lease_name)

    batch = podruns.claim_pod_runs(db, pod_runs=[pod], claimant=CLAIMANT, start_deadline=30,
                                   limit=5)

    assert batch.claims == [] and (batch.skipped, batch.deferred) == (
        (1, 0) if policy == "skip" else (0, 1))
    record = client.schedules.get("nightly")
    assert record is not None
    assert (record.dropped_count, record.deferred_count) == (
        (1, 0) if fate == "dropped" else (0, 1))
