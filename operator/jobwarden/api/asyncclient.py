"""``AsyncClient``: the client API for asyncio applications (FastAPI, aiohttp, ...).

The same methods as ``Client``'s job API, awaited, on psycopg's asyncio pool.
Each method only drives a plan of ``operations.py`` with the asyncio driver:
the rules (validation, duplicates, what a finished job means, timeouts) are
``Client``'s, not a copy of them. Host, schedule and lease management stay on
the blocking ``Client``: they are operator tools, not request-path calls.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from jobwarden import errors, settings
from jobwarden.api import operations
from jobwarden.db import plans
from jobwarden.db.asyncdatabase import AsyncDatabase
from jobwarden.jobs import definitions
from jobwarden.structs.jobs import EnqueueResult, JobRecord, JobSpec
from jobwarden.structs.states import JobStatus

JobRef = definitions.JobRef
T = TypeVar("T")
#: A psycopg ``AsyncConnection``/``AsyncTransaction`` or a SQLAlchemy ``AsyncConnection``.
AsyncCallerConnection = Any


class AsyncClient:
    """An asyncio connection pool to one Jobwarden schema plus the job operations.

    Use ``async with AsyncClient(dsn) as client:`` (or call ``await client.close()``);
    the pool opens on first use.
    """

    def __init__(self, dsn: str | None = None, *, schema: str | None = None,
                 max_connections: int = 4, database: AsyncDatabase | None = None) -> None:
        if database is not None:
            self.db = database
        else:
            resolved = dsn or settings.env_dsn()
            if not resolved:
                raise errors.ConfigurationError(
                    "no database DSN: pass AsyncClient(dsn=...) or set JOBWARDEN_DSN")
            self.db = AsyncDatabase(resolved, schema=schema or settings.env_schema(),
                                    min_size=1, max_size=max_connections)

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> AsyncClient:
        await self.db.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, plan: plans.Plan[T], conn: AsyncCallerConnection = None) -> T:
        joined = None if conn is None else plans.caller_async_connection(conn)
        return await plans.run_async(self.db, plan, joined)

    # -- enqueue -------------------------------------------------------------------

    def spec(self, job: JobRef, data: Any = None, **options: Any) -> JobSpec:
        """Validate one enqueue request and build its row (nothing is written)."""
        return operations.spec(job, data, **options)

    async def enqueue(self, job: JobRef, data: Any = None, *,
                      conn: AsyncCallerConnection = None, **options: Any) -> EnqueueResult:
        """As ``Client.enqueue``; ``conn`` is an asyncio connection or transaction."""
        specs = [operations.spec(job, data, **options)]
        return (await self.enqueue_specs(specs, conn=conn))[0]

    async def enqueue_many(self, job: JobRef, datas: Iterable[Any], *,
                           unique_keys: Sequence[str | None] | None = None,
                           conn: AsyncCallerConnection = None,
                           **options: Any) -> list[EnqueueResult]:
        batch = operations.batch_for_many(job, datas, unique_keys=unique_keys, **options)
        return await self._run(operations.enqueue_batch(batch, schema=self.db.schema), conn)

    async def enqueue_specs(self, specs: Sequence[JobSpec], *,
                            conn: AsyncCallerConnection = None) -> list[EnqueueResult]:
        return await self._run(operations.enqueue(specs, schema=self.db.schema), conn)

    # -- inspect, wait and manage --------------------------------------------------

    async def job(self, job_id: int) -> JobRecord:
        return await self._run(operations.job(job_id))

    async def jobs(self, *, status: JobStatus | str | None = None, queue: str | None = None,
                   job_class: str | None = None, limit: int = 50) -> list[JobRecord]:
        return await self._run(operations.jobs(status=status, queue=queue,
                                               job_class=job_class, limit=limit))

    async def wait(self, job_id: int, *, timeout: float | None) -> Any:
        """As ``Client.wait``: the result, or JobFailed / WaitTimeout / JobNotFound."""
        return await self._run(operations.wait(job_id, timeout=timeout))

    async def cancel(self, job_id: int) -> JobStatus:
        return await self._run(operations.cancel(job_id, schema=self.db.schema))

    async def retry(self, job_id: int) -> bool:
        return await self._run(operations.retry(job_id))

    async def purge(self, *,
                    status: JobStatus | str | Iterable[JobStatus | str] = JobStatus.COMPLETED,
                    older_than: float | datetime.timedelta = 0.0) -> int:
        return await self._run(operations.purge(status=status, older_than=older_than))

    async def stats(self) -> dict[str, dict[str, int]]:
        return await self._run(operations.stats())
