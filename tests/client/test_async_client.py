"""AsyncClient: the same rules as Client (one implementation), on asyncio connections."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
import pytest_asyncio

import jobwarden
from jobwarden.worker.worker import Worker
from tests.support import testjobs

pytestmark = pytest.mark.asyncio


class Rollback(Exception):
    pass


@pytest_asyncio.fixture
async def aclient(dsn: str) -> AsyncIterator[jobwarden.AsyncClient]:
    async with jobwarden.AsyncClient(dsn) as client:
        yield client


async def test_enqueue_inspect_cancel_retry_purge_and_stats(
        aclient: jobwarden.AsyncClient, client: jobwarden.Client) -> None:
    first = await aclient.enqueue(testjobs.Record, {"a": 1}, unique_key="k")
    again = await aclient.enqueue(testjobs.Record, {"a": 2}, unique_key="k")
    assert (again.id, again.duplicate) == (first.id, True)
    batch = await aclient.enqueue_many(testjobs.Record, [{"n": 1}, {"n": 2}],
                                       unique_keys=["k", None])
    assert [r.duplicate for r in batch] == [True, False]
    assert (await aclient.job(first.id)).data == {"a": 1}
    assert client.job(first.id).data == {"a": 1}  # the same rows the blocking client sees
    assert [j.id for j in await aclient.jobs(limit=10)] == [batch[1].id, first.id]
    assert await aclient.cancel(first.id) is jobwarden.JobStatus.CANCELLED
    assert await aclient.retry(first.id) is True
    assert await aclient.retry(first.id) is False
    assert (await aclient.stats())["default"]["pending"] == 2
    assert await aclient.purge(status="cancelled") == 0
    with pytest.raises(jobwarden.JobNotFound):
        await aclient.job(10**9)
    with pytest.raises(ValueError):
        await aclient.purge(status="pending")


async def test_bad_input_is_the_same_typed_error_as_the_blocking_client(
        aclient: jobwarden.AsyncClient) -> None:
    with pytest.raises(jobwarden.InvalidPayload):
        await aclient.enqueue(testjobs.Record, {"x": float("nan")})
    with pytest.raises(jobwarden.UnknownJob):
        await aclient.enqueue("no.such.module:Job")
    with pytest.raises(ValueError):
        await aclient.enqueue(testjobs.Record, None, delay=-1)
    assert await aclient.jobs() == []


async def test_a_rolled_back_async_transaction_leaves_no_job(
        aclient: jobwarden.AsyncClient, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        with pytest.raises(Rollback):
            async with conn.transaction():
                enqueued = await aclient.enqueue(testjobs.Record, None, conn=conn)
                assert await aclient.jobs() == []
                raise Rollback
        async with conn.transaction() as tx:
            kept = await aclient.enqueue_many(testjobs.Record, [None, None], conn=tx)
    assert [j.id for j in await aclient.jobs()] == [kept[1].id, kept[0].id]
    with pytest.raises(jobwarden.JobNotFound):
        await aclient.job(enqueued.id)


async def test_the_wrong_kind_of_connection_is_a_typed_error(
        aclient: jobwarden.AsyncClient, client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as blocking, \
            pytest.raises(jobwarden.UnsupportedConnection, match="blocking"):
        await aclient.enqueue(testjobs.Record, None, conn=blocking)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        with pytest.raises(jobwarden.UnsupportedConnection, match="async"):
            client.enqueue(testjobs.Record, None, conn=conn)
    assert await aclient.jobs() == []


async def test_wait_returns_the_result_and_raises_the_error(
        aclient: jobwarden.AsyncClient, start_worker: Callable[..., Worker]) -> None:
    start_worker(apps=["tests.support.testjobs"])
    ok = await aclient.enqueue(testjobs.add, {"a": 2, "b": 3})
    bad = await aclient.enqueue(testjobs.Hooked, {"fail": True})
    assert await aclient.wait(ok.id, timeout=30) == 5
    with pytest.raises(jobwarden.JobFailed) as failed:
        await aclient.wait(bad.id, timeout=30)
    assert failed.value.status == "failed" and "asked to fail" in str(failed.value)


async def test_a_large_async_batch_and_a_clash_in_it_keep_the_callers_work(
        aclient: jobwarden.AsyncClient, dsn: str) -> None:
    from jobwarden.db.jobs import COPY_MIN_ROWS

    size = COPY_MIN_ROWS + 8
    copied = await aclient.enqueue_many(testjobs.Record, [{"n": n} for n in range(size)])
    assert [(await aclient.job(r.id)).data for r in copied[::10]] == [
        {"n": n} for n in range(0, size, 10)]
    existing = await aclient.enqueue(testjobs.Record, None, unique_key="k-3")
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        mine = await aclient.enqueue(testjobs.Record, None, unique_key="mine", conn=conn)
        keyed = await aclient.enqueue_many(
            testjobs.Record, [None] * size, unique_keys=[f"k-{n}" for n in range(size)],
            conn=conn)
    assert (keyed[3].id, keyed[3].duplicate) == (existing.id, True)
    assert sum(not r.duplicate for r in keyed) == size - 1
    assert (await aclient.job(mine.id)).unique_key == "mine"
