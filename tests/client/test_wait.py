"""client.wait: the stored result or the job's error, woken by NOTIFY, typed timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.sql
import pytest

import jobwarden
from jobwarden.api import operations
from jobwarden.db import jobs as jobs_db
from jobwarden.db import plans
from jobwarden.db.database import Database, channel_name
from jobwarden.worker.worker import Worker
from tests.support import testjobs


def test_wait_returns_the_stored_result(client: jobwarden.Client,
                                        start_worker: Callable[..., Worker]) -> None:
    start_worker(apps=["tests.support.testjobs"])
    enqueued = client.enqueue(testjobs.add, {"a": 1, "b": 2})
    assert client.wait(enqueued.id, timeout=30) == 3
    assert client.wait(enqueued.id, timeout=0) == 3  # a finished job answers at once


def test_wait_raises_the_jobs_error(client: jobwarden.Client,
                                    start_worker: Callable[..., Worker]) -> None:
    start_worker(apps=["tests.support.testjobs"])
    enqueued = client.enqueue(testjobs.Boom, None)
    with pytest.raises(jobwarden.JobFailed) as failed:
        client.wait(enqueued.id, timeout=60)
    assert failed.value.job_id == enqueued.id
    assert failed.value.status == "failed"
    assert "boom on attempt 3" in (failed.value.error or "")


def test_wait_on_a_cancelled_job_raises_with_its_status(client: jobwarden.Client) -> None:
    enqueued = client.enqueue(testjobs.Record, None)
    client.cancel(enqueued.id)
    with pytest.raises(jobwarden.JobFailed, match="cancelled"):
        client.wait(enqueued.id, timeout=5)


def test_wait_times_out_with_a_typed_error(client: jobwarden.Client) -> None:
    enqueued = client.enqueue(testjobs.Record, None)
    with pytest.raises(jobwarden.WaitTimeout) as timed_out:
        client.wait(enqueued.id, timeout=0.2)
    assert isinstance(timed_out.value, TimeoutError)
    assert timed_out.value.job_id == enqueued.id
    with pytest.raises(jobwarden.JobNotFound):
        client.wait(10**9, timeout=1)
    with pytest.raises(ValueError):
        client.wait(enqueued.id, timeout=-1)


def test_wait_is_woken_by_the_notification_not_by_its_poll(
        client: jobwarden.Client, db: Database) -> None:
    """With an hour-long poll, only the NOTIFY of the terminal write can end the wait."""
    enqueued = client.enqueue(testjobs.Record, None)
    sleeping = threading.Event()
    raised: list[BaseException] = []

    def observed(plan: plans.Plan[Any]) -> plans.Plan[Any]:
        reply: Any = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, plans.AwaitNotify):
                sleeping.set()  # the row was read (pending) and the wait is now blocked
            reply = yield step

    def waiter() -> None:
        try:
            plans.run(db, observed(operations.wait(enqueued.id, timeout=None, poll=3600)))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert sleeping.wait(10)
    client.cancel(enqueued.id)  # a terminal write: NOTIFYs the done topic on commit
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert [type(e) for e in raised] == [jobwarden.JobFailed]


def _done_notifications_until_sentinel(listener: psycopg.Connection[Any],
                                       channel: str) -> list[int]:
    """Every job id NOTIFYd on the done channel so far: a sentinel is sent last and,
    notifications being delivered in commit order, everything before it has arrived."""
    listener.execute("SELECT pg_notify(%s, 'sentinel')", (channel,))
    ids: list[int] = []
    for note in listener.notifies(timeout=30):
        if note.payload == "sentinel":
            return ids
        ids.extend(int(i) for i in note.payload.split(","))
    raise AssertionError("the sentinel never came back")


def test_only_the_jobs_a_waiter_marked_are_notified_when_they_end(
        client: jobwarden.Client, db: Database, dsn: str,
        start_worker: Callable[..., Worker]) -> None:
    """Every NOTIFY costs each LISTENing backend of the database -- every worker's --
    a transaction (PostgreSQL before 19 signals them all, whatever the channel), so
    a terminal write notifies the done channel only for jobs a waiter marked
    (issue 31: 50 workers draining, 5.1 transactions per job instead of 0.4)."""
    channel = channel_name(db.schema, jobs_db.DONE_TOPIC)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        cancelled = client.enqueue(testjobs.Record, None)
        client.cancel(cancelled.id)  # a terminal write nobody waits for
        # One slot, no prefetch, claimed in priority order: the unwaited job's
        # completion commits before (or with) the waited one's.
        unwaited = client.enqueue(testjobs.add, {"a": 1, "b": 1}, priority=10)
        waited = client.enqueue(testjobs.add, {"a": 1, "b": 2}, priority=0)
        start_worker(apps=["tests.support.testjobs"], concurrency=1, prefetch=0)
        assert client.wait(waited.id, timeout=60) == 3
        notified = _done_notifications_until_sentinel(listener, channel)
    assert cancelled.id not in notified
    assert unwaited.id not in notified
    assert waited.id in notified
    with psycopg.connect(dsn, autocommit=True) as conn:  # the write removed the mark
        assert conn.execute(psycopg.sql.SQL(
            "SELECT count(*) FROM {}.job_waiters WHERE job_id = %s").format(
                psycopg.sql.Identifier(db.schema)), (waited.id,)).fetchone() == (0,)
