"""Database work written once, run by a synchronous or an asynchronous driver.

Why: the client API exists twice (``Client`` and ``AsyncClient``) but its rules
must exist once. A *plan* is a generator that yields instructions -- run a named
query, LISTEN to a topic, wait for a notification -- and receives each result; it
does no I/O itself. :func:`run` drives a plan with psycopg's blocking API,
:func:`run_async` with its asyncio API. Everything a plan decides (which query,
what the rows mean, when to give up) is the same code for both, so the two
clients cannot drift apart.

A plan runs on the pool's connections, or on the caller's own connection when
one is given: then every query joins the caller's transaction (the job exists
exactly when that transaction commits, and its NOTIFY is delivered then too).
LISTEN always uses a dedicated connection of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg.errors
import psycopg.sql
from psycopg.rows import tuple_row

from jobwarden import errors
from jobwarden.db.basics import Connection, Params, Row, channel_name
from jobwarden.db.faults import translate_errors

if TYPE_CHECKING:
    from jobwarden.db.asyncdatabase import AsyncDatabase
    from jobwarden.db.database import Database

T = TypeVar("T")
AsyncConnection = psycopg.AsyncConnection[Row]


@dataclasses.dataclass(frozen=True)
class Query:
    """Run the named query; the plan receives its rows (or, with ``count``, its row count)."""

    name: str
    params: Params | None = None
    count: bool = False
    #: On a pooled connection (not the caller's), run ``<name>_visible`` instead: a
    #: variant that commits asynchronously, so what it wrote is visible at once;
    #: the reply still comes only after its WAL flush (the ``flush_barrier`` query
    #: runs next on the same connection). In the caller's transaction, ``name``.
    visible_before_flush: bool = False


@dataclasses.dataclass(frozen=True)
class Copy:
    """Binary COPY of ``rows`` into the named ``COPY ... FROM STDIN`` query."""

    name: str
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class Atomic:
    """Run ``plan`` on one connection in a transaction of its own (a savepoint inside
    the caller's); the plan receives its result, or :class:`UniqueConflict` raised
    when a unique index refused a row (everything ``plan`` wrote is then undone)."""

    plan: Plan[Any]


@dataclasses.dataclass(frozen=True)
class Listen:
    """LISTEN to a topic on a dedicated connection for the rest of the plan."""

    topic: str


@dataclasses.dataclass(frozen=True)
class AwaitNotify:
    """Block up to ``timeout`` seconds; the plan receives the payloads that arrived."""

    timeout: float


@dataclasses.dataclass(frozen=True)
class Clock:
    """The plan receives a monotonic time (deadlines without reading clocks itself)."""


class UniqueConflict(Exception):
    """Raised into a plan whose :class:`Atomic` step hit a unique index."""


Instruction = Query | Copy | Atomic | Listen | AwaitNotify | Clock
Plan = Generator[Instruction, Any, T]


def rows(name: str, params: Params | None = None) -> Generator[Instruction, Any, list[Row]]:
    """``rows = yield from plans.rows(...)``: a typed helper for the common step."""
    found: list[Row] = yield Query(name, params)
    return found


# -- the synchronous driver --------------------------------------------------------


def run(db: Database, plan: Plan[T], conn: Connection | None = None) -> T:
    """Drive ``plan`` to its end with blocking I/O; its return value is the result.

    Queries run on ``conn`` when given (joining its transaction), else each on a
    pooled connection of its own.
    """
    with contextlib.ExitStack() as stack:
        listener: list[Connection] = []

        def listen(topic: str) -> None:
            if not listener:
                listener.append(db.connect())
                stack.callback(listener[0].close)
            with db.connections.bounded(listener[0]):
                listener[0].execute(_listen_sql(db.schema, topic))

        return _drive(db, plan, conn, listen, listener)


def _drive(db: Database, plan: Plan[T], conn: Connection | None,
           listen: Callable[[str], None], listener: list[Connection]) -> T:
    reply: Any = None
    raised: BaseException | None = None
    while True:
        try:
            step = plan.send(reply) if raised is None else plan.throw(raised)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, raised = None, None
        if isinstance(step, Query):
            if step.visible_before_flush and conn is None:
                reply = db.rows_then_flush(f"{step.name}_visible", step.params)
            elif step.count:
                reply = db.execute(step.name, step.params, conn=conn)
            else:
                reply = db.rows(step.name, step.params, conn=conn)
        elif isinstance(step, Copy):
            assert conn is not None, "Copy outside Atomic"
            with translate_errors(), conn.cursor() as cur, \
                    cur.copy(db.sql(step.name)) as copy:
                copy.set_types(list(step.types))
                for row in step.rows:
                    copy.write_row(row)
        elif isinstance(step, Atomic):
            try:
                if conn is None:
                    with db.transaction() as own:
                        reply = _drive(db, step.plan, own, listen, listener)
                else:
                    with translate_errors(), conn.transaction():
                        reply = _drive(db, step.plan, conn, listen, listener)
            except psycopg.errors.UniqueViolation as exc:
                raised = UniqueConflict(str(exc))
        elif isinstance(step, Listen):
            listen(step.topic)
        elif isinstance(step, AwaitNotify):
            assert listener, "AwaitNotify before Listen"
            reply = _await_notify(listener[0], step.timeout)
        else:
            reply = time.monotonic()


def _await_notify(listener: Connection, timeout: float) -> list[str]:
    with translate_errors():
        payloads = [n.payload for n in listener.notifies(timeout=max(timeout, 0.0),
                                                           stop_after=1)]
        if payloads:
            payloads.extend(n.payload for n in listener.notifies(timeout=0.0))
    return payloads


def _listen_sql(schema: str, topic: str) -> psycopg.sql.Composed:
    return psycopg.sql.SQL("LISTEN {}").format(
        psycopg.sql.Identifier(channel_name(schema, topic)))


# -- the asynchronous driver -------------------------------------------------------


async def run_async(db: AsyncDatabase, plan: Plan[T], conn: AsyncConnection | None = None) -> T:
    """Drive ``plan`` to its end with asyncio I/O; the same plans as :func:`run`."""
    async with contextlib.AsyncExitStack() as stack:
        listener: list[AsyncConnection] = []

        async def listen(topic: str) -> None:
            if not listener:
                listener.append(await db.connect())
                stack.push_async_callback(listener[0].close)
            async with db.bounded(listener[0]):
                await listener[0].execute(_listen_sql(db.schema, topic))

        return await _drive_async(db, plan, conn, listen, listener)


async def _drive_async(db: AsyncDatabase, plan: Plan[T], conn: AsyncConnection | None,
                       listen: Callable[[str], Awaitable[None]],
                       listener: list[AsyncConnection]) -> T:
    reply: Any = None
    raised: BaseException | None = None
    while True:
        try:
            step = plan.send(reply) if raised is None else plan.throw(raised)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, raised = None, None
        if isinstance(step, Query):
            if conn is None and step.visible_before_flush:
                async with db.connection() as own:
                    reply = await _query_async(
                        db, Query(f"{step.name}_visible", step.params), own)
                    with translate_errors():
                        await own.execute(db.sql("flush_barrier"))
            elif conn is None:
                async with db.connection() as own:
                    reply = await _query_async(db, step, own)
            else:
                reply = await _query_async(db, step, conn)
        elif isinstance(step, Copy):
            assert conn is not None, "Copy outside Atomic"
            with translate_errors():
                async with conn.cursor() as cur, cur.copy(db.sql(step.name)) as copy:
                    copy.set_types(list(step.types))
                    for row in step.rows:
                        await copy.write_row(row)
        elif isinstance(step, Atomic):
            try:
                if conn is None:
                    async with db.connection() as own, own.transaction():
                        reply = await _drive_async(db, step.plan, own, listen, listener)
                else:
                    with translate_errors():
                        async with conn.transaction():
                            reply = await _drive_async(db, step.plan, conn, listen, listener)
            except psycopg.errors.UniqueViolation as exc:
                raised = UniqueConflict(str(exc))
        elif isinstance(step, Listen):
            await listen(step.topic)
        elif isinstance(step, AwaitNotify):
            assert listener, "AwaitNotify before Listen"
            reply = await _await_notify_async(listener[0], step.timeout)
        else:
            reply = time.monotonic()


async def _query_async(db: AsyncDatabase, step: Query, conn: AsyncConnection) -> Any:
    with translate_errors():
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(db.sql(step.name), step.params)
            if step.count:
                return cur.rowcount
            return await cur.fetchall() if cur.description is not None else []


async def _await_notify_async(listener: AsyncConnection, timeout: float) -> list[str]:
    with translate_errors():
        payloads = [n.payload async for n in listener.notifies(timeout=max(timeout, 0.0),
                                                                 stop_after=1)]
        if payloads:
            payloads.extend([n.payload async for n in listener.notifies(timeout=0.0)])
    return payloads


# -- the caller's connection ---------------------------------------------------------


def caller_connection(obj: Any) -> Connection:
    """The psycopg connection behind what an application passes as ``conn=``.

    Accepted: a psycopg ``Connection`` or ``Transaction``, a SQLAlchemy ``Session``
    or ``Connection`` on the psycopg dialect, Django's connection (the
    ``django.db.connection`` wrapper, PostgreSQL backend on psycopg 3). They are
    recognised by shape, so neither SQLAlchemy nor Django is imported here.
    """
    found = _unwrap(obj)
    if isinstance(found, psycopg.Connection):
        return found
    if isinstance(found, psycopg.AsyncConnection):
        raise errors.UnsupportedConnection(
            "an async psycopg connection needs jobwarden.AsyncClient, not Client")
    raise errors.UnsupportedConnection(_unsupported(obj))


def caller_async_connection(obj: Any) -> AsyncConnection:
    """As :func:`caller_connection`, for asyncio: a psycopg ``AsyncConnection`` (or
    ``AsyncTransaction``) or a SQLAlchemy ``AsyncSession`` / ``AsyncConnection``."""
    found = _unwrap(obj)
    if isinstance(found, psycopg.AsyncConnection):
        return found
    if isinstance(found, psycopg.Connection):
        raise errors.UnsupportedConnection(
            "a blocking psycopg connection needs jobwarden.Client, not AsyncClient")
    raise errors.UnsupportedConnection(_unsupported(obj))


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, (psycopg.Connection, psycopg.AsyncConnection)):
        return obj
    if isinstance(obj, (psycopg.Transaction, psycopg.AsyncTransaction)):
        return obj.connection
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if kind.startswith("sqlalchemy."):
        return _sqlalchemy(obj)
    if kind.startswith("django.") and hasattr(obj, "ensure_connection"):
        obj.ensure_connection()  # Django connects lazily
        return obj.connection
    return obj


def _sqlalchemy(obj: Any) -> Any:
    # Session.connection() / AsyncSession's sync_session join the session's transaction;
    # a Connection's .connection is the pool's proxy, whose driver_connection is psycopg's.
    sync = getattr(obj, "sync_session", None) or getattr(obj, "sync_connection", None)
    if sync is not None:
        obj = sync
    if hasattr(obj, "get_bind") and callable(getattr(obj, "connection", None)):
        obj = obj.connection()  # a Session: its Connection inside the session's transaction
    proxy = getattr(obj, "connection", None)
    return getattr(proxy, "driver_connection", proxy)


def _unsupported(obj: Any) -> str:
    return (f"conn= must be a psycopg connection or transaction, a SQLAlchemy session or "
            f"connection on the psycopg driver, or Django's connection, not "
            f"{type(obj).__module__}.{type(obj).__qualname__}")

