"""Attempt history: every finished attempt keeps its start, end, host, outcome and error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import psycopg

import jobwarden
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion, Failure
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import wait_for

TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom'


def _expire_claims(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET claim_expires_at = now() - interval '1 second' "
                     "WHERE status = 'processing'")


def test_each_ended_attempt_is_kept_with_host_outcome_error_and_traceback(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record, max_retries=5).id
    [first] = db.jobs.claim(host="host-a", limit=1, grace_seconds=30)
    assert db.jobs.fail(Failure(id=job_id, claim_token=first.claim_token, error=TRACE,
                                retryable=True, retry_in_seconds=0)) is JobStatus.PENDING
    [_second] = db.jobs.claim(host="host-b", limit=1, grace_seconds=30)
    _expire_claims(dsn)
    assert [r.status for r in db.jobs.reap()] == [JobStatus.PENDING]
    [third] = db.jobs.claim(host="host-c", limit=1, grace_seconds=30)
    assert db.jobs.complete_many([Completion(id=job_id, claim_token=third.claim_token,
                                             result={"ok": 1})]) == {job_id}
    history = client.attempts(job_id)
    assert [(a.attempt, a.host, a.outcome, a.status_after) for a in history] == [
        (1, "host-a", "failed", "pending"),
        (2, "host-b", "reaped", "pending"),
        (3, "host-c", "completed", "completed"),
    ]
    assert history[0].error == "RuntimeError: boom" and history[0].traceback == TRACE
    assert history[1].error is not None and history[1].error.startswith("reaped: no heartbeat")
    assert history[1].traceback is None
    assert history[2].error is None
    for attempt in history:
        assert attempt.started_at is not None and attempt.started_at <= attempt.finished_at


def test_a_fenced_write_records_no_attempt(client: jobwarden.Client, db: Database,
                                           dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [stale] = db.jobs.claim(host="old", limit=1, grace_seconds=30)
    _expire_claims(dsn)
    db.jobs.reap()
    db.jobs.claim(host="new", limit=1, grace_seconds=30)
    assert db.jobs.complete_many([Completion(id=job_id, claim_token=stale.claim_token,
                                             result=None)]) == set()
    assert db.jobs.fail(Failure(id=job_id, claim_token=stale.claim_token, error="late",
                                retryable=True, retry_in_seconds=0)) is None
    assert [(a.attempt, a.outcome) for a in client.attempts(job_id)] == [(1, "reaped")]


def test_history_is_bounded_to_the_last_25_attempts(client: jobwarden.Client,
                                                    db: Database) -> None:
    job_id = client.enqueue(testjobs.Record, max_retries=100).id
    for _ in range(30):
        [claim] = db.jobs.claim(host="h", limit=1, grace_seconds=30)
        db.jobs.fail(Failure(id=job_id, claim_token=claim.claim_token, error="e",
                             retryable=True, retry_in_seconds=0))
    assert [a.attempt for a in client.attempts(job_id)] == list(range(6, 31))


def test_purging_a_job_removes_its_history(client: jobwarden.Client, db: Database,
                                           dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [claim] = db.jobs.claim(host="h", limit=1, grace_seconds=30)
    db.jobs.complete_many([Completion(id=job_id, claim_token=claim.claim_token, result=None)])
    assert client.purge(status="completed") == 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM jobwarden.job_attempts").fetchone() == (0,)


def test_a_worker_records_the_real_traceback_of_each_failed_attempt(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(testjobs.Boom).id
    start_worker()
    wait_for(lambda: client.job(job_id).status is JobStatus.FAILED)
    history = client.attempts(job_id)
    assert [(a.attempt, a.outcome, a.status_after) for a in history] == [
        (1, "failed", "pending"), (2, "failed", "pending"), (3, "failed", "failed")]
    assert [a.error for a in history] == [f"RuntimeError: boom on attempt {n}" for n in (1, 2, 3)]
    assert all(a.traceback and "Traceback" in a.traceback and "perform" in a.traceback
               for a in history)
    assert {a.host for a in history} == {"test-host-0"}

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")},
           "JOBWARDEN_DSN": dsn, "PYTHONPATH": repo}
    shown = subprocess.run([sys.executable, "-m", "jobwarden", "jobs", "show", str(job_id),
                            "--json"], env=env, capture_output=True, text=True, check=True)
    assert [a["outcome"] for a in json.loads(shown.stdout)["history"]] == ["failed"] * 3
    text = subprocess.run([sys.executable, "-m", "jobwarden", "jobs", "show", str(job_id),
                           "--traceback"], env=env, capture_output=True, text=True, check=True)
    assert "RuntimeError: boom on attempt 3" in text.stdout
    assert "traceback of attempt 3:" in text.stdout
