"""Claims, fencing, heartbeats and the reaper, on the database alone (no worker threads)."""

from __future__ import annotations

import datetime
import threading
import uuid

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion, Failure
from jobwarden.structs.states import JobStatus
from tests.support import testjobs


def _expire_claims(dsn: str) -> None:
    """Time travel on the database side: every claim's reap deadline is now in the past."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET claim_expires_at = now() - interval '1 second' "
                     "WHERE status = 'processing'")


def test_each_claim_gets_a_fresh_token_and_counts_the_attempt(client: jobwarden.Client,
                                                              db: Database, dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [first] = db.jobs.claim(host="a", limit=5, grace_seconds=30)
    assert first.id == job_id and first.attempt == 1
    _expire_claims(dsn)
    assert [r.status for r in db.jobs.reap()] == [JobStatus.PENDING]
    [second] = db.jobs.claim(host="b", limit=5, grace_seconds=30)
    assert second.attempt == 2
    assert second.claim_token != first.claim_token


@pytest.mark.parametrize("capped", [True, False], ids=["capped (workers)", "uncapped"])
def test_claims_follow_priority_then_run_at(client: jobwarden.Client, db: Database,
                                            capped: bool) -> None:
    if capped:  # the path every worker takes: through the host registry
        db.hosts.register(host="h", pool="default", code_version="", cap=None,
                          worker_id=uuid.uuid4(), pid=1, concurrency=10, queues=())
    now = db.now()
    low_new = client.enqueue(testjobs.Record, priority=0, run_at=now).id
    high = client.enqueue(testjobs.Record, priority=10, run_at=now).id
    # A later id with an earlier run_at: run_at order and id order disagree.
    low_old = client.enqueue(testjobs.Record, priority=0,
                             run_at=now - datetime.timedelta(minutes=5)).id
    low_older = client.enqueue(testjobs.Record, priority=0,
                               run_at=now - datetime.timedelta(minutes=10)).id
    claimed = db.jobs.claim(host="h", limit=4, grace_seconds=30, host_cap=capped)
    assert [c.id for c in claimed] == [high, low_older, low_old, low_new]


def test_claims_only_take_the_requested_queues(client: jobwarden.Client, db: Database) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    report = client.enqueue(testjobs.Record, queue="reports").id
    assert [c.id for c in db.jobs.claim(host="h", limit=5, grace_seconds=30,
                                        queues=["reports"])] == [report]


def test_concurrent_claimants_never_share_a_job(client: jobwarden.Client, dsn: str) -> None:
    client.enqueue_many(testjobs.Record, [None] * 400)
    taken: list[int] = []
    lock = threading.Lock()

    def claimant(n: int) -> None:
        with Database(dsn, min_size=1, max_size=1) as own:
            while True:
                got = own.jobs.claim(host=f"h{n}", limit=7, grace_seconds=30)
                if not got:
                    return
                with lock:
                    taken.extend(c.id for c in got)

    threads = [threading.Thread(target=claimant, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 400
    assert len(set(taken)) == 400


def test_an_outcome_from_a_reaped_claim_is_fenced(client: jobwarden.Client, db: Database,
                                                  dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [old] = db.jobs.claim(host="a", limit=1, grace_seconds=30)
    _expire_claims(dsn)
    db.jobs.reap()
    [new] = db.jobs.claim(host="b", limit=1, grace_seconds=30)
    stale = Completion(id=job_id, claim_token=old.claim_token, result="from the old claim")
    assert db.jobs.complete_many([stale]) == set()
    assert db.jobs.fail(Failure(id=job_id, claim_token=old.claim_token, error="x",
                                retryable=True, retry_in_seconds=0)) is None
    assert not db.jobs.release(job_id=job_id, claim_token=old.claim_token)
    assert db.jobs.heartbeat_many([(job_id, old.claim_token)], grace_seconds=30).alive == set()
    record = client.job(job_id)
    assert record.status is JobStatus.PROCESSING and record.result is None
    assert db.jobs.complete_many([Completion(id=job_id, claim_token=new.claim_token,
                                             result="new")]) == {job_id}
    assert client.job(job_id).result == "new"


def test_heartbeats_push_the_reap_deadline(client: jobwarden.Client, db: Database,
                                           dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=0.01)
    ack = db.jobs.heartbeat_many([(job_id, claim.claim_token)], grace_seconds=3600)
    assert ack.alive == {job_id}
    assert db.jobs.reap() == []  # would have been reaped on the 10 ms grace
    assert db.jobs.heartbeat_many([(job_id, uuid.uuid4())], grace_seconds=1).alive == set()


def test_the_reaper_retries_idempotent_and_interrupts_non_idempotent_jobs(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    retried = client.enqueue(testjobs.Sleepy).id
    interrupted = client.enqueue(testjobs.SleepyOnce).id
    exhausted = client.enqueue(testjobs.Sleepy, max_retries=0).id
    cancelled = client.enqueue(testjobs.Sleepy).id
    db.jobs.claim(host="dead-host", limit=10, grace_seconds=30)
    client.cancel(cancelled)
    _expire_claims(dsn)
    reaped = {r.id: r.status for r in db.jobs.reap()}
    assert reaped == {retried: JobStatus.PENDING, interrupted: JobStatus.INTERRUPTED,
                      exhausted: JobStatus.FAILED, cancelled: JobStatus.CANCELLED}
    assert "reaped: no heartbeat from dead-host" in (client.job(interrupted).last_error or "")
    assert db.jobs.reap() == []  # nothing twice
    # An interrupted job is never claimed again by itself.
    assert [c.id for c in db.jobs.claim(host="b", limit=10, grace_seconds=30)] == [retried]


def test_failures_retry_with_backoff_then_fail(client: jobwarden.Client, db: Database) -> None:
    job_id = client.enqueue(testjobs.Boom, max_retries=1).id
    [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=30)
    status = db.jobs.fail(Failure(id=job_id, claim_token=claim.claim_token, error="e1",
                                  retryable=True, retry_in_seconds=3600))
    assert status is JobStatus.PENDING
    assert db.jobs.claim(host="a", limit=1, grace_seconds=30) == []  # backing off
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now()")
    [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=30)
    assert db.jobs.fail(Failure(id=job_id, claim_token=claim.claim_token, error="e2",
                                retryable=True, retry_in_seconds=0)) is JobStatus.FAILED
    record = client.job(job_id)
    assert (record.attempts, record.last_error) == (2, "e2")
    assert record.finished_at is not None


def test_a_released_claim_gives_its_attempt_back(client: jobwarden.Client, db: Database) -> None:
    job_id = client.enqueue(testjobs.Record, max_retries=0).id
    for _ in range(5):
        [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=30)
        assert db.jobs.release(job_id=job_id, claim_token=claim.claim_token, deferral=True)
    record = client.job(job_id)
    assert (record.status, record.attempts, record.deferrals) == (JobStatus.PENDING, 0, 5)


def test_cancel_retry_purge_and_stats(client: jobwarden.Client, db: Database) -> None:
    pending = client.enqueue(testjobs.Record).id
    running = client.enqueue(testjobs.Record).id
    assert client.cancel(pending) is JobStatus.CANCELLED
    [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=30)
    assert claim.id == running
    assert client.cancel(running) is JobStatus.PROCESSING
    assert client.job(running).cancel_requested
    assert db.jobs.heartbeat_many([(running, claim.claim_token)],
                                  grace_seconds=30).cancel_requested == {running}
    assert client.retry(pending)
    assert client.job(pending).status is JobStatus.PENDING
    assert not client.retry(running)  # not finished: nothing to retry
    db.jobs.complete_many([Completion(id=running, claim_token=claim.claim_token, result=1)])
    assert client.stats()["default"]["completed"] == 1
    assert client.purge(status="completed", older_than=3600) == 0
    assert client.purge(status="completed") == 1
    assert client.stats()["default"] == {"pending": 1, "processing": 0, "completed": 0,
                                         "failed": 0, "interrupted": 0, "cancelled": 0}


def test_claiming_uses_the_partial_index_with_many_finished_rows(client: jobwarden.Client,
                                                                 dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO jobwarden.jobs (job_class, status, finished_at)
                        SELECT 'a:B', 'completed', now() FROM generate_series(1, 50000)""")
        conn.execute("ANALYZE jobwarden.jobs")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM jobwarden.jobs WHERE status = 'pending' AND run_at <= now() "
            "AND pod_run IS NULL "
            "ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED").fetchall())
    assert "jobs_claim_pool_any_idx" in plan, plan
