"""Jobwarden, through its public API only (the slot the engine fills in).

Client side: ``jobwarden.Client(dsn)`` with ``enqueue(noop, {"i": i})`` and
``enqueue_many(noop, [...])`` (one round trip). The client is synchronous by
design; the harness awaits nothing else meanwhile, so calling it from the
adapter's ``async`` methods measures exactly what a caller gets.

Worker side: the thread-based ``Worker`` run in-process with
``WorkerSettings(concurrency=N)``; "best" is the out-of-the-box default
concurrency. The job is a plain ``def`` (the worker runs attempts in slot
threads; the recorder is thread-safe).

Leases (issue 3): ``client.lease(name, ttl=...)`` used as a context manager,
acquire on enter and release on exit; enabled when the client has it.

Everything the harness needs from Jobwarden is in this one module; if the
engine's API moves, only this file changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import psycopg

import jobwarden
from bench.adapters import base
from jobwarden import settings as jw_settings
from jobwarden.assembly import build_worker
from jobwarden.db.database import Database

SCHEMA = "jobwarden"
LEASE_TTL_SECONDS = 30.0

_on_job: base.OnJob | None = None


@jobwarden.job(max_retries=0)
def noop(i: int) -> None:
    assert _on_job is not None, "the worker sets the hook before it starts"
    _on_job(i)


def _best_concurrency() -> int:
    return jw_settings.WorkerSettings().concurrency


class _Client:
    def __init__(self, client: jobwarden.Client, dsn: str) -> None:
        self._client = client
        self._dsn = dsn

    async def enqueue_one(self, i: int) -> None:
        self._client.enqueue(noop, {"i": i})

    async def enqueue_batch(self, first: int, count: int) -> None:
        self._client.enqueue_many(noop, [{"i": i} for i in range(first, first + count)])

    async def reset(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {SCHEMA}.jobs CASCADE")  # constant schema, not input

    async def unfinished(self) -> int:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {SCHEMA}.jobs"  # noqa: S608 (constant schema)
                " WHERE status IN ('pending', 'processing')"
            ).fetchone()
        return int(row[0]) if row else 0


class JobwardenSystem:
    name = "jobwarden"
    supports_leases = hasattr(jobwarden.Client, "lease")
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"

    def describe(self) -> dict[str, str]:
        from importlib import metadata

        try:
            version = metadata.version("jobwarden")
        except metadata.PackageNotFoundError:
            version = "source checkout"
        return {
            "version": version,
            "driver": f"psycopg {psycopg.__version__} (psycopg_pool), thread worker",
            "enqueue": "Client.enqueue(noop, data) / Client.enqueue_many(noop, datas)",
            "worker": "build_worker(db, WorkerSettings(concurrency=N)).start()",
            "best": f"out of the box: concurrency={_best_concurrency()}",
        }

    async def install(self, dsn: str) -> None:
        with Database(dsn, schema=SCHEMA) as db:
            db.migrate()

    @contextlib.asynccontextmanager
    async def client(self, dsn: str) -> AsyncIterator[base.Client]:
        with jobwarden.Client(dsn, schema=SCHEMA) as client:
            yield _Client(client, dsn)

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
        options: dict[str, Any] = {"http_port": None}
        if setting.concurrency is not None:
            options["concurrency"] = setting.concurrency
        with Database(dsn, schema=SCHEMA) as db:
            worker = build_worker(db, jw_settings.WorkerSettings(**options))
            worker.start()
            try:
                await stop.wait()
            finally:
                await asyncio.to_thread(worker.stop)

    @contextlib.contextmanager
    def lease_cycle(self, dsn: str, index: int) -> Iterator[base.LeaseCycle]:
        if not self.supports_leases:
            raise NotImplementedError("jobwarden.Client has no lease() yet")
        name = f"bench:{index}"
        with jobwarden.Client(dsn, schema=SCHEMA) as client:

            def cycle() -> None:
                with client.lease(name, ttl=LEASE_TTL_SECONDS):
                    pass

            yield cycle


def system() -> base.System:
    return JobwardenSystem()
