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
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import psycopg

import jobwarden
from bench.adapters import base
from jobwarden import settings as jw_settings
from jobwarden.assembly import build_worker
from jobwarden.db.database import Database

SCHEMA = "jobwarden"
JOB_CLASS = f"{__name__}:noop"  # what ``@jobwarden.job`` names the function below
PROBE_HOST = "bench-probe"
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

    @property
    def supports_leases(self) -> bool:
        # A property, not a class attribute: the worker child (whose idle RSS is measured)
        # then never imports the client, as a worker process of an application that only
        # defines jobs would not.
        return hasattr(jobwarden.Client, "lease")
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

    async def fill(self, dsn: str, *, pending: int, completed: int) -> None:
        # A finished job leaves its jobs row (status completed, its claim's
        # columns set) and one job_attempts row; a pending one only its row.
        # (The schema is spelled out in the statements: it is SCHEMA.)
        with psycopg.connect(dsn, autocommit=True) as conn:
            if completed:
                conn.execute(
                    "INSERT INTO jobwarden.jobs (job_class, data, max_retries, status,"
                    " attempts, claim_token, claimed_by, claimed_at, heartbeat_at,"
                    " finished_at, result, run_at, created_at, updated_at)"
                    " SELECT %s, jsonb_build_object('i', -g), 0, 'completed', 1,"
                    " gen_random_uuid(), 'bench-fill', t, t, t, 'null', t, t, t"
                    " FROM generate_series(1, %s) AS g,"
                    " (SELECT now() - interval '1 hour' AS t) AS at",
                    (JOB_CLASS, completed),
                )
                conn.execute(
                    "INSERT INTO jobwarden.job_attempts (job_id, slot, attempt, started_at,"
                    " finished_at, host, outcome, status_after)"
                    " SELECT id, 1, 1, claimed_at, finished_at, claimed_by, 'completed',"
                    " 'completed' FROM jobwarden.jobs WHERE status = 'completed'"
                )
            if pending:
                conn.execute(
                    "INSERT INTO jobwarden.jobs (job_class, data, max_retries)"
                    " SELECT %s, jsonb_build_object('i', g), 0"
                    " FROM generate_series(1, %s) AS g",
                    (JOB_CLASS, pending),
                )

    async def claim_latencies(self, dsn: str, *, samples: int) -> list[float]:
        timings: list[float] = []
        with Database(dsn, schema=SCHEMA, min_size=1, max_size=1) as db:
            db.check()
            for _ in range(samples):
                started = time.perf_counter()
                db.jobs.claim(host=PROBE_HOST, limit=1, grace_seconds=600)
                timings.append((time.perf_counter() - started) * 1000)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE jobwarden.jobs SET status = 'pending', claim_token = NULL,"
                " claimed_by = NULL, claimed_at = NULL, heartbeat_at = NULL,"
                " claim_expires_at = NULL, attempts = 0"
                " WHERE claimed_by = %s AND status = 'processing'",
                (PROBE_HOST,),
            )
        return timings

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
