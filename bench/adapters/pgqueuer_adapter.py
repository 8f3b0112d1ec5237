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
import datetime
import json
import time
import uuid
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any, Literal

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import EntrypointExecutionParameter, Queries
from pgqueuer.types import QueueEntrypoint, QueueManagerId
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

    async def fill(self, dsn: str, *, pending: int, completed: int) -> None:
        # A finished job leaves no queue row (it is deleted) but three log rows
        # (queued, picked, successful), folded into the statistics by the
        # workers' periodic aggregation (aggregated = true) long before an hour
        # has passed; an enqueued job leaves its queued row and a "queued" log
        # row, not aggregated yet -- both as ``Queries.enqueue`` writes them.
        conn = await _connect(dsn)
        try:
            if completed:
                await conn.execute(
                    "INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint,"
                    " aggregated) SELECT now() - interval '1 hour', g, s.status::pgqueuer_status,"
                    " 0, $1, true FROM generate_series(1, $2::bigint) AS g,"
                    " (VALUES (1, 'queued'), (2, 'picked'), (3, 'successful')) AS s(n, status)"
                    " ORDER BY g, s.n",
                    ENTRYPOINT,
                    completed,
                )
                # The queue's ids continue after the finished jobs' ids.
                await conn.execute("SELECT setval('pgqueuer_id_seq', $1::bigint)", completed)
            if pending:
                await conn.execute(
                    "WITH inserted AS (INSERT INTO pgqueuer (priority, entrypoint, payload,"
                    " execute_after, status) SELECT 0, $1, convert_to(json_build_object('i', g)"
                    "::text, 'UTF8'), now(), 'queued' FROM generate_series(1, $2::bigint) AS g"
                    " RETURNING id, entrypoint, priority)"
                    " INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)"
                    " SELECT id, 'queued', entrypoint, priority FROM inserted",
                    ENTRYPOINT,
                    pending,
                )
        finally:
            await conn.close()

    async def claim_latencies(self, dsn: str, *, samples: int) -> list[float]:
        conn = await _connect(dsn)
        manager_id = QueueManagerId(uuid.uuid4())
        entrypoints = {QueueEntrypoint(ENTRYPOINT): EntrypointExecutionParameter(0)}
        timings: list[float] = []
        try:
            queries = Queries(AsyncpgDriver(conn))
            for _ in range(samples):
                started = time.perf_counter()
                await queries.dequeue(
                    batch_size=1,
                    entrypoints=entrypoints,
                    queue_manager_id=manager_id,
                    global_concurrency_limit=None,
                    heartbeat_timeout=datetime.timedelta(seconds=30),
                )
                timings.append((time.perf_counter() - started) * 1000)
            await conn.execute(
                "UPDATE pgqueuer SET status = 'queued', queue_manager_id = NULL"
                " WHERE queue_manager_id = $1 AND status = 'picked'",
                manager_id,
            )
        finally:
            await conn.close()
        return timings

    def lease_cycle(
        self, dsn: str, index: int
    ) -> contextlib.AbstractContextManager[base.LeaseCycle]:
        raise NotImplementedError("pgqueuer has no lease API")


def system() -> base.System:
    return PgqueuerSystem()
