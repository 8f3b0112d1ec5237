"""A single enqueue wakes one idle worker, not the whole fleet (issue 31).

Why: every worker LISTENs for enqueues and claims when it hears one, so each
single job enqueued into an idle fleet of N workers cost N claims (51 claims
per job at 50 workers, 161 at 200: docs/benchmarks.md, "Machine or herd?").
Idle workers now mark themselves in ``job_wakeups`` (migration 0025) with a
channel of their own, and a single enqueue NOTIFYs one marked worker. The
claims are counted by the workers themselves (their claim rounds); the polls
are an hour apart, so every round here is one a NOTIFY caused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

import jobwarden
from jobwarden.db.database import Database
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import wait_for

FLEET = 6
JOBS = 5
HOUR = 3600.0


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def schema(db: Database) -> str:
    return db.schema


def _marks(conn: psycopg.Connection, schema: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}.job_wakeups").format(
        sql.Identifier(schema))).fetchone()
    assert row is not None
    return int(row[0])


def _claim_rounds(fleet: list[Worker]) -> int:
    return sum(w.claimer.progress.rounds for w in fleet)


def _run_one(client: jobwarden.Client, n: int) -> None:
    job_id = client.enqueue(testjobs.Record, {"n": n}).id
    wait_for(lambda: client.job(job_id).status is jobwarden.JobStatus.COMPLETED, timeout=60,
             message=f"job {n} completed")


def test_each_single_enqueue_into_an_idle_fleet_is_claimed_by_one_worker(
        client: jobwarden.Client, start_worker: Callable[..., Worker],
        conn: psycopg.Connection, schema: str) -> None:
    fleet = [start_worker(poll_interval=HOUR, idle_interval=HOUR) for _ in range(FLEET)]
    for worker in fleet:
        assert worker.listening.wait(30), "a worker never verified its LISTEN connection"
    # Each worker claimed once its LISTEN was verified, found nothing, and marked itself.
    wait_for(lambda: _marks(conn, schema) == FLEET, timeout=60,
             message="every idle worker marked for wake-ups")
    wait_for(lambda: all(w.claimer.progress.since is None for w in fleet),
             message="no claim round in progress")
    before = _claim_rounds(fleet)
    for n in range(JOBS):
        _run_one(client, n)
        # The woken worker claimed with a slot to spare and marked itself again.
        wait_for(lambda: _marks(conn, schema) == FLEET, timeout=60,
                 message="the woken worker marked again")
    wait_for(lambda: all(w.claimer.progress.since is None for w in fleet),
             message="no claim round in progress")
    rounds = _claim_rounds(fleet) - before
    print(f"\n{JOBS} single enqueues into {FLEET} idle workers: {rounds} claim rounds")
    # One claim per job; before, every idle worker claimed on every enqueue (30 here).
    assert rounds <= JOBS + 2


def test_a_wake_up_that_reaches_nobody_is_caught_by_the_poll(
        client: jobwarden.Client, start_worker: Callable[..., Worker],
        conn: psycopg.Connection, schema: str) -> None:
    worker = start_worker(poll_interval=0.05, idle_interval=0.5)
    assert worker.listening.wait(30), "the worker never verified its LISTEN connection"
    # A mark whose worker went away without removing it (a crash): the newest, so
    # the enqueue takes it and NOTIFYs a channel nobody LISTENs on.
    conn.execute(sql.SQL(
        "INSERT INTO {}.job_wakeups (id, channel, until) OVERRIDING SYSTEM VALUE "
        "VALUES (4611686018427387904, 'nobody_listens', now() + interval '1 hour')").format(
        sql.Identifier(schema)))
    job_id = client.enqueue(testjobs.Record, {"n": 1}).id
    wait_for(lambda: client.job(job_id).status is jobwarden.JobStatus.COMPLETED, timeout=60,
             message="the job claimed by the worker's poll")
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}.job_wakeups WHERE channel = %s")
                       .format(sql.Identifier(schema)), ("nobody_listens",)).fetchone()
    assert row == (0,), "the enqueue did not take the stale mark"
    assert worker.claimer.wake_channel is not None


def test_a_stopped_worker_leaves_no_mark(
        start_worker: Callable[..., Worker], conn: psycopg.Connection, schema: str) -> None:
    worker = start_worker(poll_interval=HOUR, idle_interval=HOUR)
    assert worker.listening.wait(30), "the worker never verified its LISTEN connection"
    wait_for(lambda: _marks(conn, schema) == 1, timeout=60, message="the worker marked")
    worker.stop(timeout=30)
    assert _marks(conn, schema) == 0
