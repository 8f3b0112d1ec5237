"""procrastinate, used the way its documentation shows.

``App(connector=PsycopgConnector(conninfo=...))`` with an async task,
``defer_async`` one by one and ``batch_defer_async`` for batches, and the
worker run in-process with ``app.run_worker_async(concurrency=N)`` (LISTEN/NOTIFY
on, the default polling interval as the fallback, finished jobs kept as the
default ``delete_jobs="never"`` does). Its worker fetches one job per query,
whatever the concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import procrastinate
import psycopg
from procrastinate.types import JSONDict

from bench.adapters import base

# procrastinate's worker defaults to one job at a time and its docs give no
# throughput recommendation. Its single fetch loop takes one job per query, so
# more slots stop helping early: on these 2-core machines concurrency 10 was no
# faster than 4 when the machine was quiet and slower under load. Its best
# setting here is therefore 4 (the "best" row repeats c4 with more jobs).
BEST_CONCURRENCY = 4

NOTIFY_TRIGGER = "procrastinate_jobs_notify_queue_job_inserted_v1"

_on_job: base.OnJob | None = None


def _make_app(dsn: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        assert _on_job is not None, "the worker sets the hook before it starts"
        _on_job(i)

    return app


class _Client:
    def __init__(self, app: procrastinate.App, dsn: str) -> None:
        self._task = app.tasks["noop"]
        self._dsn = dsn

    async def enqueue_one(self, i: int) -> None:
        await self._task.defer_async(i=i)

    async def enqueue_batch(self, first: int, count: int) -> None:
        kwargs: list[JSONDict] = [{"i": i} for i in range(first, first + count)]
        await self._task.batch_defer_async(*kwargs)

    async def reset(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
            await conn.execute(
                "TRUNCATE procrastinate_jobs, procrastinate_events,"
                " procrastinate_workers RESTART IDENTITY CASCADE"
            )

    async def unfinished(self) -> int:
        async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
            )
            row = await cur.fetchone()
            return int(row[0]) if row else 0


class ProcrastinateSystem:
    name = "procrastinate"
    supports_leases = False
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"

    def describe(self) -> dict[str, str]:
        return {
            "version": procrastinate.__version__,
            "driver": f"psycopg {psycopg.__version__} (PsycopgConnector pool)",
            "enqueue": "task.defer_async(i=...) / task.batch_defer_async(*kwargs)",
            "worker": "app.run_worker_async(concurrency=N, listen_notify=True)",
            "best": f"concurrency={BEST_CONCURRENCY} (its default is 1; 10 was no faster)",
        }

    async def install(self, dsn: str) -> None:
        app = _make_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    @contextlib.asynccontextmanager
    async def client(self, dsn: str) -> AsyncIterator[base.Client]:
        app = _make_app(dsn)
        async with app.open_async():
            yield _Client(app, dsn)

    async def run_worker(
        self,
        dsn: str,
        *,
        setting: base.WorkerSetting,
        on_job: base.OnJob,
        stop: asyncio.Event,
    ) -> None:
        global _on_job
        _on_job = on_job
        app = _make_app(dsn)
        concurrency = setting.concurrency or BEST_CONCURRENCY
        options: dict[str, Any] = {
            "concurrency": concurrency,
            "install_signal_handlers": False,
            "listen_notify": True,
        }
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(**options))
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({worker, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if worker.done():
                worker.result()  # the worker died on its own: surface why
                return
            # Cancelling run_worker_async is procrastinate's graceful stop: the
            # worker finishes its running jobs before the task ends.
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    async def fill(self, dsn: str, *, pending: int, completed: int) -> None:
        # A finished job leaves its row (succeeded, 1 attempt, no worker once its
        # worker unregistered) and three events (deferred, started, succeeded); a
        # deferred one its todo row and a "deferred" event (its insert trigger).
        # The per-row NOTIFY trigger is off during the load: nobody listens, and a
        # notification leaves nothing behind.
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            if completed:
                await conn.execute(
                    "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status,"
                    " attempts) SELECT 'default', 'noop', jsonb_build_object('i', -g),"
                    " 'succeeded', 1 FROM generate_series(1, %s) AS g",
                    (completed,),
                )
                await conn.execute(
                    "INSERT INTO procrastinate_events (job_id, type, at)"
                    " SELECT j.id, e.type::procrastinate_job_event_type,"
                    " now() - interval '1 hour' FROM procrastinate_jobs AS j,"
                    " (VALUES (1, 'deferred'), (2, 'started'), (3, 'succeeded')) AS e(n, type)"
                    " WHERE j.status = 'succeeded' ORDER BY j.id, e.n"
                )
            if pending:
                async with conn.transaction():
                    await conn.execute(
                        f"ALTER TABLE procrastinate_jobs DISABLE TRIGGER {NOTIFY_TRIGGER}"
                    )
                    await conn.execute(
                        "INSERT INTO procrastinate_jobs (queue_name, task_name, args)"
                        " SELECT 'default', 'noop', jsonb_build_object('i', g)"
                        " FROM generate_series(1, %s) AS g",
                        (pending,),
                    )
                    await conn.execute(
                        f"ALTER TABLE procrastinate_jobs ENABLE TRIGGER {NOTIFY_TRIGGER}"
                    )

    async def claim_latencies(self, dsn: str, *, samples: int) -> list[float]:
        app = _make_app(dsn)
        timings: list[float] = []
        async with app.open_async():
            manager = app.job_manager
            worker_id = await manager.register_worker()
            try:
                for _ in range(samples):
                    started = time.perf_counter()
                    await manager.fetch_job(queues=None, worker_id=worker_id)
                    timings.append((time.perf_counter() - started) * 1000)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(
                        "UPDATE procrastinate_jobs SET status = 'todo', worker_id = NULL"
                        " WHERE worker_id = %s AND status = 'doing'",
                        (worker_id,),
                    )
            finally:
                await manager.unregister_worker(worker_id)
        return timings

    def lease_cycle(
        self, dsn: str, index: int
    ) -> contextlib.AbstractContextManager[base.LeaseCycle]:
        raise NotImplementedError("procrastinate has no lease API")


def system() -> base.System:
    return ProcrastinateSystem()
