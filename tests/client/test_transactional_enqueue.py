"""Enqueue inside the application's transaction: the job exists exactly when it commits."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

import jobwarden
from jobwarden.structs.jobs import EnqueueResult
from jobwarden.worker.worker import Worker
from tests.support import testjobs


class Rollback(Exception):
    pass


def test_a_rolled_back_transaction_leaves_no_job(client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn, pytest.raises(Rollback), conn.transaction():
        conn.execute("CREATE TABLE orders (id int)")
        job = client.enqueue(testjobs.Record, {"order": 1}, conn=conn)
        many = client.enqueue_many(testjobs.Record, [{"n": 1}, {"n": 2}], conn=conn)
        # Inside the transaction the rows are there for the caller...
        assert client.jobs(limit=10) == []  # ...but nobody else sees them
        assert {job.id, *(r.id for r in many)} == {
            r[0] for r in conn.execute("SELECT id FROM jobwarden.jobs").fetchall()}
        raise Rollback
    assert client.jobs(limit=10) == []
    with pytest.raises(jobwarden.JobNotFound):
        client.job(job.id)


def test_a_committed_enqueue_is_claimed_and_wakes_workers_on_commit(
        client: jobwarden.Client, dsn: str, start_worker: Callable[..., Worker]) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobwarden_jobs")
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                enqueued = client.enqueue(testjobs.Record, {"order": 7}, conn=conn)
                # Not committed: no notification has been delivered yet.
                assert list(listener.notifies(timeout=0.2)) == []
            received = list(listener.notifies(timeout=10, stop_after=1))
    assert [n.payload for n in received] == ["default"]
    start_worker(apps=["tests.support.testjobs"])
    assert client.wait(enqueued.id, timeout=30) == {"order": 7}
    assert [row[0] for row in ran_job_ids(dsn)] == [enqueued.id]


def ran_job_ids(dsn: str) -> list[tuple[int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT job_id FROM public.audit WHERE event = 'ran'").fetchall()


def test_a_transaction_object_is_accepted(client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn, conn.transaction() as tx:
        result = client.enqueue(testjobs.Record, None, conn=tx)
    assert client.job(result.id).status is jobwarden.JobStatus.PENDING


def test_unique_keys_inside_one_transaction_and_after_a_rollback(
        client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn, pytest.raises(Rollback), conn.transaction():
        first = client.enqueue(testjobs.Record, {"a": 1}, unique_key="order:1", conn=conn)
        again = client.enqueue(testjobs.Record, {"a": 2}, unique_key="order:1", conn=conn)
        assert (again.id, again.duplicate, first.duplicate) == (first.id, True, False)
        raise Rollback
    # The rolled-back row never held the key: a later enqueue is not a duplicate.
    fresh = client.enqueue(testjobs.Record, {"a": 3}, unique_key="order:1")
    assert not fresh.duplicate
    assert client.job(fresh.id).data == {"a": 3}


def test_a_concurrent_enqueue_of_an_uncommitted_key_waits_for_the_outcome(
        client: jobwarden.Client, dsn: str) -> None:
    """The second enqueuer blocks on the first one's uncommitted key, then gets its id."""
    results: list[EnqueueResult] = []
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            first = client.enqueue(testjobs.Record, None, unique_key="k", conn=conn)
            waiting = threading.Event()

            def other() -> None:
                waiting.set()
                results.append(client.enqueue(testjobs.Record, None, unique_key="k"))

            thread = threading.Thread(target=other)
            thread.start()
            waiting.wait(10)
            # The other enqueuer cannot finish before this transaction does.
            thread.join(timeout=0.3)
            assert thread.is_alive()
        thread.join(timeout=30)
    assert results == [EnqueueResult(id=first.id, duplicate=True)]


def test_an_unsupported_connection_is_a_typed_error_and_stores_nothing(
        client: jobwarden.Client) -> None:
    with pytest.raises(jobwarden.UnsupportedConnection):
        client.enqueue(testjobs.Record, None, conn=object())
    assert client.jobs(limit=10) == []


def test_bad_data_in_a_batch_stores_nothing_in_the_callers_transaction(
        client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn, conn.transaction():
        with pytest.raises(jobwarden.InvalidPayload):
            client.enqueue_many(testjobs.Record, [{"ok": 1}, {"bad": object()}], conn=conn)
        assert conn.execute("SELECT count(*) FROM jobwarden.jobs").fetchone() == (0,)
