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
import math
import time
from collections.abc import AsyncIterator
from typing import Any, LiteralString

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

from jobwarden import errors
from jobwarden.db import deadlines, pool, queries
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
                reconnect_timeout=0, configure=self._stamp,
            )
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {exc}") from exc
        self._opened = False
        self._open_lock = asyncio.Lock()
        #: When (monotonic) a call or check was last abandoned: a pooled connection
        #: last known good before that is discarded unchecked (see :meth:`_usable`).
        self._abandoned_at = -math.inf

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
            conn = await self._checkout(deadline)
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

    async def _checkout(self, deadline: float) -> AsyncConnection:
        """A pooled connection that is usable as far as can be told (:meth:`_usable`),
        waited for up to the pool timeout or ``deadline``, whichever comes first."""
        while True:
            conn = await self.pool.getconn(
                timeout=max(min(self._timeout, deadline - time.monotonic()), 0.001))
            if await self._usable(conn, deadline):
                return conn
            await self.pool.putconn(conn)  # closed: the pool discards and replaces it

    async def _usable(self, conn: AsyncConnection, deadline: float) -> bool:
        """The blocking pool's rule (``Pool._usable``), for the asyncio pool.

        After a silence every pooled connection may be dead for good, and each would
        cost a call its whole bound: one last known good before a call or check on
        this pool was abandoned is closed unchecked; one idle longer than
        ``IDLE_CHECK_SECONDS`` is checked first (an empty query, within the call's
        deadline and at most ``CHECK_SECONDS``). Otherwise handing it out costs nothing.
        """
        if conn.closed or conn.broken:
            return False
        now = time.monotonic()
        good_at: float = getattr(conn, "_jobwarden_good_at", now)
        if good_at < self._abandoned_at:
            await conn.close()
            return False
        if now - good_at > pool.IDLE_CHECK_SECONDS:
            token = WATCHDOG.arm(conn, min(deadline, now + pool.CHECK_SECONDS))
            try:
                await conn.execute("")
            except psycopg.Error:
                WATCHDOG.disarm(token)
                await conn.close()
                self._abandoned_at = time.monotonic()
                return False
            if not WATCHDOG.disarm(token):
                await conn.close()
                self._abandoned_at = time.monotonic()
                return False
        return True

    async def _stamp(self, conn: AsyncConnection) -> None:
        """A new connection, or one whose call was answered in time, is known good now."""
        conn._jobwarden_good_at = time.monotonic()  # type: ignore[attr-defined]

    async def _release(self, conn: AsyncConnection, token: int) -> bool:
        """Disarm and give back; an abandoned connection is closed first (discarded)."""
        in_time = WATCHDOG.disarm(token)
        if in_time:
            await self._stamp(conn)
        else:
            await conn.close()
            self._abandoned_at = time.monotonic()
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
