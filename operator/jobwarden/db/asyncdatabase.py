"""The asyncio twin of :class:`~jobwarden.db.database.Database`, for ``AsyncClient``.

Only the I/O differs: the same named queries rendered for the same schema, the
same error translation, psycopg's ``AsyncConnectionPool`` instead of the blocking
one. What to run is decided by plans (``db/plans.py``), never here, so nothing
of the job rules is written twice. The same deadlines too (``db/deadlines.py``):
a block on a pooled connection is one call within its bound, and an abandoned
one raises ``DatabaseUnavailable`` with its connection discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, LiteralString

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobwarden import errors
from jobwarden.db import deadlines, queries
from jobwarden.db.basics import DEFAULT_SCHEMA, Row, checked_schema
from jobwarden.db.deadlines import WATCHDOG, CallBounds, Watched, abandoned_error, tcp_options
from jobwarden.db.faults import translate_errors

AsyncConnection = psycopg.AsyncConnection[Row]


class AsyncDatabase:
    """A pool of asyncio connections to one Jobwarden schema, opened on first use."""

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA, min_size: int = 1,
                 max_size: int = 4, timeout: float = 10.0,
                 application_name: str = "jobwarden", bounds: CallBounds | None = None) -> None:
        if not dsn:
            raise errors.ConfigurationError("no database DSN: pass dsn= or set JOBWARDEN_DSN")
        self.dsn = dsn
        self.schema = checked_schema(schema)
        self.q = queries.for_schema(schema)
        #: The bound of each kind of call (``db/deadlines.py``; ``JOBWARDEN_DB_*_TIMEOUT``).
        self.bounds = bounds if bounds is not None else CallBounds.from_env()
        self._timeout = timeout
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True, "application_name": application_name,
        }
        try:
            # As the blocking pool's: without it psycopg's default (130 s) holds each of the
            # pool's connection attempts into a silent peer, and the pool makes no other
            # meanwhile, so calls fail at their bound long after the peer answers again.
            if "connect_timeout" not in conninfo.conninfo_to_dict(dsn):
                self._connect_kwargs["connect_timeout"] = deadlines.CONNECT_TIMEOUT_SECONDS
            self._connect_kwargs.update(tcp_options(dsn))
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
    async def connection(self, bound: float | None = None) -> AsyncIterator[AsyncConnection]:
        """A pooled connection for the block; the block (the wait for a connection
        included) is one call of ``bound`` seconds (default: the ``call`` bound)."""
        await self.open()
        bound = self.bounds.call if bound is None else bound
        deadline = self.bounds.deadline(bound)
        with translate_errors():
            conn = await self.pool.getconn(
                timeout=max(min(self._timeout, deadline - time.monotonic()), 0.001))
            token = WATCHDOG.arm(conn, deadline)
            released = False
            try:
                yield conn
            except (psycopg.OperationalError, errors.DatabaseUnavailable) as exc:
                released = True
                if not await self._release(conn, token):
                    raise abandoned_error(bound, exc) from exc
                raise
            finally:
                if not released:
                    await self._release(conn, token)

    async def _release(self, conn: AsyncConnection, token: int) -> bool:
        """Disarm and give back; an abandoned connection is closed first (discarded)."""
        in_time = WATCHDOG.disarm(token)
        if not in_time:
            await conn.close()
        await self.pool.putconn(conn)
        return in_time

    @contextlib.asynccontextmanager
    async def bounded(self, conn: AsyncConnection,
                      bound: float | None = None) -> AsyncIterator[AsyncConnection]:
        """The block's calls on a dedicated connection within ``bound`` (default: the
        ``call`` bound); past it the connection is closed, ``DatabaseUnavailable``."""
        watched = Watched(conn, self.bounds.call if bound is None else bound)
        try:
            with watched, translate_errors():
                yield conn
        finally:
            if watched.abandoned:
                await conn.close()

    async def connect(self) -> AsyncConnection:
        """A dedicated connection outside the pool (LISTEN); bound its calls with
        :meth:`bounded`."""
        with translate_errors():
            return await psycopg.AsyncConnection.connect(self.dsn, **{
                "connect_timeout": deadlines.CONNECT_TIMEOUT_SECONDS, **self._connect_kwargs})
