"""The asyncio twin of :class:`~jobwarden.db.database.Database`, for ``AsyncClient``.

Only the I/O differs: the same named queries rendered for the same schema, the
same error translation, psycopg's ``AsyncConnectionPool`` instead of the blocking
one. What to run is decided by plans (``db/plans.py``), never here, so nothing
of the job rules is written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, LiteralString

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobwarden import errors
from jobwarden.db import queries
from jobwarden.db.basics import _SCHEMA_NAME, DEFAULT_SCHEMA, Row
from jobwarden.db.faults import translate_errors

AsyncConnection = psycopg.AsyncConnection[Row]


class AsyncDatabase:
    """A pool of asyncio connections to one Jobwarden schema, opened on first use."""

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA, min_size: int = 1,
                 max_size: int = 4, timeout: float = 10.0,
                 application_name: str = "jobwarden") -> None:
        if not dsn:
            raise errors.ConfigurationError("no database DSN: pass dsn= or set JOBWARDEN_DSN")
        if not _SCHEMA_NAME.fullmatch(schema):
            raise errors.ConfigurationError(
                f"invalid schema name {schema!r}: use letters, digits and underscores, "
                "starting with a letter or underscore (at most 63 characters)"
            )
        self.dsn = dsn
        self.schema = schema
        self.q = queries.for_schema(schema)
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True, "application_name": application_name,
        }
        try:
            self.pool: AsyncConnectionPool[AsyncConnection] = AsyncConnectionPool(
                dsn, min_size=min_size, max_size=max_size, timeout=timeout,
                kwargs=self._connect_kwargs, open=False, name=f"jobwarden-async-{schema}",
                reconnect_timeout=0,
            )
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {exc}") from exc
        self._opened = False
        self._open_lock = asyncio.Lock()

    async def open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                await self.pool.open(wait=False)
                self._opened = True

    async def close(self) -> None:
        if self._opened:
            await self.pool.close()
            self._opened = False

    def sql(self, name: str) -> LiteralString:
        return self.q[name]  # rendered from the package's own .sql files

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        await self.open()
        with translate_errors():
            async with self.pool.connection() as conn:
                yield conn

    async def connect(self) -> AsyncConnection:
        """A dedicated connection outside the pool (LISTEN)."""
        with translate_errors():
            return await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=5,
                                                         **self._connect_kwargs)
