"""A job's effects and its own completion in one transaction, fenced on its claim."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Callable

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.worker.context import Attempt, AttemptContext
from jobwarden.worker.worker import Worker
from tests.support import ledgerjobs
from tests.support.waiting import wait_for


def ledger(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT job_id, n FROM public.ledger ORDER BY id").fetchall()


@pytest.fixture
def ledger_dsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ledgerjobs.LEDGER_DDL)
    return dsn


def test_the_effect_and_the_completion_commit_together(
        client: jobwarden.Client, ledger_dsn: str, start_worker: Callable[..., Worker]) -> None:
    enqueued = client.enqueue(ledgerjobs.Book, {"n": 1})
    start_worker(apps=["tests.support.ledgerjobs"])
    assert client.wait(enqueued.id, timeout=30) == {"booked": 1}
    record = client.job(enqueued.id)
    assert (record.status, record.attempts) == (jobwarden.JobStatus.COMPLETED, 1)
    assert ledger(ledger_dsn) == [(enqueued.id, 1)]
    # The worker's own completion found the row completed by this claim: not fenced.
    assert [a.outcome for a in client.attempts(enqueued.id)] == ["completed"]


def test_a_claim_taken_over_fails_the_transaction_and_applies_nothing(
        client: jobwarden.Client, db: Database, ledger_dsn: str) -> None:
    enqueued = client.enqueue(ledgerjobs.Book, {"n": 2})
    (claim,) = db.jobs.claim(host="paused-host", limit=1, grace_seconds=60)
    job = ledgerjobs.Book()
    job.job_id, job.attempt = claim.id, claim.attempt
    job._context = AttemptContext(Attempt(claim), lambda a: (True, False), db=db)
    with psycopg.connect(ledger_dsn, autocommit=True) as other:  # a reaper and a new claim
        other.execute("UPDATE jobwarden.jobs SET claim_token = gen_random_uuid() WHERE id = %s",
                      (claim.id,))
    with pytest.raises(jobwarden.JobFenced):
        job.perform({"n": 2})
    assert ledger(ledger_dsn) == []
    assert client.job(enqueued.id).status is jobwarden.JobStatus.PROCESSING


def test_outside_a_worker_it_is_a_typed_error(ledger_dsn: str) -> None:
    job = ledgerjobs.Book()
    job.job_id, job.attempt = 1, 1
    with pytest.raises(jobwarden.ConfigurationError):
        job.perform({"n": 3})
    assert ledger(ledger_dsn) == []


def test_a_transactional_job_is_stored_as_safe_to_rerun(client: jobwarden.Client) -> None:
    assert client.job(client.enqueue(ledgerjobs.BookOnce, {"n": 1}).id).idempotent is True


@pytest.mark.slow
@pytest.mark.parametrize("job", [ledgerjobs.Book, ledgerjobs.BookOnce])
def test_exactly_one_ledger_row_per_job_while_workers_are_sigkilled(
        client: jobwarden.Client, ledger_dsn: str, job: type[jobwarden.Job],
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    n = 40
    ids = [r.id for r in client.enqueue_many(job, [{"n": i, "pause": 0.3} for i in range(n)])]
    workers = [spawn_worker("--concurrency", "4") for _ in range(2)]
    rng = random.Random(19)
    for kill in range(6):
        # Kill only once jobs progress, so each kill lands among running attempts.
        wanted = (kill + 1) * 4
        wait_for(lambda wanted=wanted: len(ledger(ledger_dsn)) >= wanted,  # type: ignore[misc]
                 timeout=60, message="progress between kills")
        victim = workers.pop(rng.randrange(len(workers)))
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        workers.append(spawn_worker("--concurrency", "4"))

    def all_done() -> bool:
        return all(client.job(i).status.terminal for i in ids)

    wait_for(all_done, timeout=120, interval=0.2, message="every job finished")
    assert {client.job(i).status for i in ids} == {jobwarden.JobStatus.COMPLETED}
    rows = ledger(ledger_dsn)
    assert len(rows) == n
    assert sorted(job_id for job_id, _ in rows) == sorted(ids)
    assert {client.job(i).result["booked"] for i in ids} == set(range(n))
    # The kills did hit running attempts (reaped, then run again), yet nothing doubled.
    assert any(a.outcome == "reaped" for i in ids for a in client.attempts(i))
