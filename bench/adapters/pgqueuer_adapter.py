"""pgqueuer, used the way its documentation shows.

asyncpg is pgqueuer's recommended driver (its own benchmark page measures it
at about twice the psycopg driver), so both the client and the worker use
``AsyncpgDriver``; the worker runs on uvloop like ``pgq run`` does. Tables are
installed with the default ``durable`` durability (all tables WAL-logged).

Concurrency. A limited worker is configured the way pgqueuer is built to be:

* N >= 2: ``qm.run(max_concurrent_tasks=N, batch_size=N // 2)``, the per-worker
  hard cap (it must be at least twice the batch size);
* N = 1, which that cap cannot express: the per-entrypoint
  ``concurrency_limit=1`` (enforced in the dequeue SQL) with ``batch_size=1``.
  The batch size matters: completions are buffered until ``batch_size`` of
  them are waiting or 0.1 s passes, and a job only stops counting against the
  limit once its completion is flushed, so the default batch of 10 with a
  limit of 1 runs one job per 0.1 s (10 jobs/s) - a misconfiguration, not a
  fair number.

"best" is the plain out-of-the-box worker: ``qm.run()``, batches of 10, no limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any, Literal

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from psycopg import conninfo

from bench.adapters import base

ENTRYPOINT = "noop"


async def _connect(dsn: str) -> Any:
    """asyncpg takes URLs or keywords, not libpq key=value strings: translate."""
    params = conninfo.conninfo_to_dict(dsn)
    return await asyncpg.connect(
        host=params.get("host"),
        port=int(str(params["port"])) if "port" in params else None,
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
    )


def _payload(i: int) -> bytes:
    return json.dumps({"i": i}).encode()


class _Client:
    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._queries = Queries(AsyncpgDriver(conn))

    async def enqueue_one(self, i: int) -> None:
        await self._queries.enqueue(ENTRYPOINT, _payload(i))

    async def enqueue_batch(self, first: int, count: int) -> None:
        await self._queries.enqueue(
            [ENTRYPOINT] * count,
            [_payload(i) for i in range(first, first + count)],
            [0] * count,
        )

    async def reset(self) -> None:
        await self._conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")

    async def unfinished(self) -> int:
        # Finished jobs leave the queue table for pgqueuer_log.
        count: int = await self._conn.fetchval("SELECT count(*) FROM pgqueuer")
        return count


def _run_options(concurrency: int | None) -> tuple[dict[str, Any], int]:
    """``qm.run`` keyword arguments and the entrypoint's concurrency_limit."""
    if concurrency is None:
        return {}, 0
    if concurrency == 1:
        return {"batch_size": 1}, 1
    return {"batch_size": concurrency // 2, "max_concurrent_tasks": concurrency}, 0


class PgqueuerSystem:
    name = "pgqueuer"
    supports_leases = False
    event_loop: Literal["asyncio", "uvloop"] = "uvloop"

    def describe(self) -> dict[str, str]:
        return {
            "version": metadata.version("pgqueuer"),
            "driver": f"asyncpg {metadata.version('asyncpg')} (AsyncpgDriver), uvloop worker",
            "enqueue": "queries.enqueue(entrypoint, payload) / the same with lists",
            "worker": (
                "QueueManager.run(); N=1: batch_size=1 + entrypoint concurrency_limit=1;"
                " N>=2: max_concurrent_tasks=N, batch_size=N//2"
            ),
            "best": "out of the box: batch_size=10, no concurrency limit",
        }

    async def install(self, dsn: str) -> None:
        conn = await _connect(dsn)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def client(self, dsn: str) -> AsyncIterator[base.Client]:
        conn = await _connect(dsn)
        try:
            yield _Client(conn)
        finally:
            await conn.close()

    async def run_worker(
        self,
        dsn: str,
        *,
        setting: base.WorkerSetting,
        on_job: base.OnJob,
        stop: asyncio.Event,
    ) -> None:
        conn = await _connect(dsn)
        try:
            qm = QueueManager(Queries(AsyncpgDriver(conn)))

            run_options, entrypoint_limit = _run_options(setting.concurrency)

            @qm.entrypoint(ENTRYPOINT, concurrency_limit=entrypoint_limit)
            async def noop(job: Job) -> None:
                assert job.payload is not None
                on_job(json.loads(job.payload)["i"])

            worker = asyncio.create_task(qm.run(**run_options))
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({worker, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if worker.done():
                worker.result()  # the worker died on its own: surface why
                return
            # Setting the shutdown event is pgqueuer's graceful stop: running jobs
            # finish and the buffered status log is flushed before run() returns.
            qm.shutdown.set()
            await worker
        finally:
            await conn.close()

    def lease_cycle(
        self, dsn: str, index: int
    ) -> contextlib.AbstractContextManager[base.LeaseCycle]:
        raise NotImplementedError("pgqueuer has no lease API")


def system() -> base.System:
    return PgqueuerSystem()
