"""``Job.heartbeat()`` trusts an "alive" answer only while it is younger than the grace.

The database answers as of when it ran the heartbeat. A process paused (GC,
SIGSTOP, a frozen VM) while that answer was on its way reads it after the claim
may have been reaped and taken by another worker. The fault is injected the way
tests/worker/test_lost_replies.py does: the real statement runs against the real
database, then the claim is reaped and re-claimed, and the answer reaches the job
only once the grace has passed since the question left.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

import jobwarden
from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.structs.jobs import HeartbeatAck
from jobwarden.worker.context import Attempt, AttemptContext
from jobwarden.worker.heartbeats import Heartbeater
from tests.support import testjobs
from tests.support.waiting import wait_for

GRACE = 0.5


def _heartbeater(db: Database) -> Heartbeater:
    return Heartbeater(db, grace_seconds=GRACE, extensions=[],
                       db_state=lambda _ok: None, timed_out=lambda _attempt: None)


def _answers_recorded(db: Database, *, reclaim: str | None, dsn: str) -> list[HeartbeatAck]:
    """Record each heartbeat answer; with ``reclaim``, the first is late and stale.

    Late: it reaches the caller a grace after it was asked (the pause). Stale:
    meanwhile the claim was reaped and host ``reclaim`` claimed the job again.
    """
    real = db.jobs.heartbeat_many
    answers: list[HeartbeatAck] = []

    def heartbeat_many(*args: Any, **kwargs: Any) -> HeartbeatAck:
        asked = time.monotonic()
        ack = real(*args, **kwargs)
        answers.append(ack)
        if reclaim is not None and len(answers) == 1:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE jobwarden.jobs SET claim_expires_at = now() - "
                             "interval '1 second' WHERE status = 'processing'")
            assert [r.status.value for r in db.jobs.reap()] == ["pending"]
            assert db.jobs.claim(host=reclaim, limit=1, grace_seconds=60)
            wait_for(lambda: time.monotonic() - asked >= GRACE, message="the pause to last")
        return ack

    db.jobs.heartbeat_many = heartbeat_many  # type: ignore[method-assign]
    return answers


def test_an_alive_answer_read_a_grace_after_it_was_asked_is_asked_again_and_fences(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record).id
    [claim] = db.jobs.claim(host="paused", limit=1, grace_seconds=60)
    answers = _answers_recorded(db, reclaim="other", dsn=dsn)
    context = AttemptContext(attempt := Attempt(claim), _heartbeater(db).one)
    with pytest.raises(errors.JobFenced):
        context.heartbeat()
    assert [job_id in ack.alive for ack in answers] == [True, False]  # stale, then the truth
    assert attempt.fenced
    record = client.job(job_id)
    assert (record.claimed_by, record.attempts) == ("other", 2)


def test_a_prompt_alive_answer_costs_one_statement(client: jobwarden.Client, db: Database,
                                                    dsn: str) -> None:
    client.enqueue(testjobs.Record)
    [claim] = db.jobs.claim(host="a", limit=1, grace_seconds=60)
    answers = _answers_recorded(db, reclaim=None, dsn=dsn)
    AttemptContext(Attempt(claim), _heartbeater(db).one).heartbeat()
    assert len(answers) == 1
