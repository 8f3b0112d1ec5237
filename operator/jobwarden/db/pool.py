"""The connection pool: checked checkouts, prompt resumption after an outage.

Apart from the :class:`~jobwarden.db.database.Database` facade (named queries,
table modules, migrations, notifications), because how connections are made,
checked and replaced is one concern -- the one every outage test exercises --
and what is run over them is another.

One :class:`Pool` per :class:`Database`. It owns a psycopg
``ConnectionPool`` (autocommit: every named query is its own transaction
unless a table module opens one explicitly), recognises connections the
server closed at checkout, and keeps asking for a connection while the server
is away, so callers resume within about ``RECONNECT_POLL_SECONDS`` of it
accepting connections again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, LiteralString, NoReturn

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from jobwarden import errors
from jobwarden.db.basics import Connection, Params, Row
from jobwarden.db.calls import MISSES_BEFORE_PLAIN, PreparedCall, run_prepared
from jobwarden.db.faults import first_line as _first_line
from jobwarden.db.faults import translate_errors, translated
from jobwarden.settings import PREPARED_STATEMENTS_ENV as PREPARED_STATEMENTS_ENV
from jobwarden.settings import env_prepare_threshold as env_prepare_threshold

logger = logging.getLogger(__name__)

_IDLE = psycopg.pq.TransactionStatus.IDLE

#: While no pooled connection is ready, a caller asks the pool again this often.
#: Each ask lets the pool try to connect once more, so callers resume within
#: about this long of the server accepting connections (the pool's own retries
#: back off to many seconds, and it gives up on them: see ``Database.connection``).
RECONNECT_POLL_SECONDS = 0.1
#: A pooled connection idle longer than this is checked (one empty round trip)
#: before it is handed out: a network path can drop a quiet connection silently.
IDLE_CHECK_SECONDS = 30.0
#: Connecting to a host that does not answer (failover, a moved address) gives up
#: after this long unless the DSN sets ``connect_timeout``.
CONNECT_TIMEOUT_SECONDS = 5


class _QuietReconnects(logging.Filter):
    """Drop psycopg_pool's per-attempt connect warnings for Jobwarden's pools.

    ``Database.connection`` asks the pool to connect every RECONNECT_POLL_SECONDS
    while the server is away; each failed attempt would log two warnings. The
    caller that finally gives up raises DatabaseUnavailable, which is logged once.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        ours = bool(record.args) and isinstance(record.args, tuple) \
            and str(record.args[0]).startswith("jobwarden-")
        return not (ours and (message.startswith("error connecting in")
                              or message.startswith("reconnection attempt in pool")))


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())


def describe_dsn(dsn: str) -> str:
    """"database NAME on HOST:PORT" for a message: what the DSN names, never its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the database of the given DSN"
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    name = str(params.get("dbname") or params.get("user") or "postgres")
    return f"database {name!r} on {host}:{port}"


def _timed_out(exc: PoolTimeout) -> errors.JobwardenError:
    mine = translated(exc)
    assert mine is not None
    return mine


def _exec_bare(conn: Connection, query: bytes) -> None:
    """Run a statement without parameters through libpq's blocking ``PQexec``, rows
    ignored: a fraction of the client instructions of a cursor's ``execute``."""
    result = conn.pgconn.exec_(query)
    if result.status not in (psycopg.pq.ExecStatus.TUPLES_OK,
                             psycopg.pq.ExecStatus.COMMAND_OK):
        if conn.pgconn.status != psycopg.pq.ConnStatus.OK:
            raise psycopg.OperationalError(
                conn.pgconn.error_message.decode(errors="replace") or "connection lost")
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)


def _expired(conn: Connection) -> bool:
    """Whether psycopg_pool's ``max_lifetime`` for ``conn`` has passed (its own stamp)."""
    expire_at: float = getattr(conn, "_expire_at", math.inf)
    return expire_at <= time.monotonic()


class Pool:
    """Connections to one database: pooled (checked at checkout) or dedicated."""

    def __init__(self, dsn: str, *, name: str, min_size: int, max_size: int, timeout: float,
                 application_name: str, prepare_threshold: int | None) -> None:
        self.dsn = dsn
        self._timeout = timeout
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
            "application_name": application_name,
        }
        try:
            if "connect_timeout" not in conninfo.conninfo_to_dict(dsn):
                self._connect_kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        #: Bumped whenever a statement failed for a connection-level reason: every
        #: pooled connection last checked before that is checked again at checkout.
        self._faults = 0
        #: Prepared calls a server connection did not hold (see ``db/calls.py``);
        #: at MISSES_BEFORE_PLAIN the pool sends their plain text for good.
        self.prepared_misses = 0
        #: At most one idle connection kept out of the psycopg pool for the next
        #: checkout (see :meth:`_give_back`); guarded by ``_parked_lock``.
        self._parked: list[Connection] = []
        self._parked_lock = threading.Lock()
        try:
            #: The psycopg pool itself (tests hold its connections to exhaust it).
            self.pool: ConnectionPool[Connection] = ConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                kwargs=self._connect_kwargs,
                open=False,
                name=name,
                # Give up a failed background connect at once: the caller's own loop in
                # connection() asks again every RECONNECT_POLL_SECONDS (the pool's
                # retries back off exponentially from 1 s, too slow to resume promptly).
                reconnect_timeout=0,
            )
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        self.pool.open(wait=False)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        self.unpark()
        self.pool.close()

    @property
    def closed(self) -> bool:
        return self.pool.closed

    def unpark(self) -> None:
        """Hand the parked connection back to the psycopg pool (see :meth:`_give_back`).

        For code that takes connections from the psycopg pool directly (the tests
        and the outage bench exhaust it): it then holds every connection.
        """
        with self._parked_lock:
            parked, self._parked = self._parked, []
        for conn in parked:
            self.pool.putconn(conn)

    def connect(self) -> Connection:
        """A dedicated connection outside the pool (LISTEN, long waits)."""
        with translate_errors():
            return psycopg.connect(self.dsn, **{"connect_timeout": CONNECT_TIMEOUT_SECONDS,
                                                **self._connect_kwargs})

    # -- execution -----------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A checked pooled connection for the block; waits up to the pool timeout.

        After an outage the pool holds connections the server closed: each one is
        recognised at checkout (see :meth:`_usable`) and replaced, so the first call
        after the server is back succeeds. While no connection can be made the
        caller keeps asking the pool (every ``RECONNECT_POLL_SECONDS``) until its
        timeout, so it resumes as soon as the server accepts connections again.
        """
        with translate_errors():
            conn = self._checkout()
            try:
                yield conn
            except psycopg.OperationalError:
                self._faults += 1
                raise
            finally:
                self._give_back(conn)

    def statement(self, query: LiteralString, params: Params | None, *,
                  fetch: bool, then: bytes | None = None) -> tuple[list[Row], int]:
        """Run one statement on a checked pooled connection: (its rows, its rowcount).

        The path of every named query (``Database.rows``/``row``/``execute``): the
        same checkout, fault counting and error translation as :meth:`connection`,
        written out without context managers, and through one cursor kept per
        pooled connection instead of a new cursor (and its adapters) per
        statement. On a lease pair this path cost the client more than the
        statements' own driver calls. ``fetch=False``: rows are not read ([]).
        ``then``: a statement without parameters run next on the same connection,
        its rows ignored (the enqueue's flush barrier, ``Database.rows_then_flush``).
        """
        conn = self._checked_out()
        try:
            cur: psycopg.Cursor[Row] | None = getattr(conn, "_jobwarden_cursor", None)
            if cur is None:
                cur = conn.cursor()
                conn._jobwarden_cursor = cur  # type: ignore[attr-defined]
            cur.execute(query, params)
            found = (cur.fetchall() if fetch else []), cur.rowcount
            if then is not None:
                _exec_bare(conn, then)
            return found
        except psycopg.Error as exc:
            self._failed(exc)
        finally:
            self._give_back(conn)

    def call(self, call: PreparedCall, params: Params, *,
             then: bytes | None = None) -> list[Row]:
        """The rows of one hot named query, run as a protocol-level prepared statement.

        The same checkout, fault counting and error translation as :meth:`statement`;
        see ``db/calls.py`` for why these statements are prepared and why that is
        safe behind a pooler. A statement the server connection lost runs as plain
        text instead (nothing ran the first time). ``then``: as in :meth:`statement`.
        """
        if self.prepared_misses >= MISSES_BEFORE_PLAIN:
            return self.statement(call.text, params, fetch=True, then=then)[0]
        conn = self._checked_out()
        try:
            rows = run_prepared(conn, call, params)
            if rows is None:
                self.prepared_misses += 1
                if self.prepared_misses == MISSES_BEFORE_PLAIN:
                    logger.info("prepared statements are lost between calls (a pooler?): "
                                "sending plain statements from now on")
                with conn.cursor() as cur:
                    cur.execute(call.text.encode(), params)
                    rows = cur.fetchall()
            if then is not None:
                _exec_bare(conn, then)
            return rows
        except psycopg.Error as exc:
            self._failed(exc)
        finally:
            self._give_back(conn)

    def _checked_out(self) -> Connection:
        """A checked pooled connection (:meth:`_checkout`); a pool timeout translated."""
        try:
            return self._checkout()
        except PoolTimeout as exc:
            raise _timed_out(exc) from exc

    def _failed(self, exc: psycopg.Error) -> NoReturn:
        """Raise ``exc`` as a Jobwarden error (counted as a fault if the connection's)."""
        if isinstance(exc, psycopg.OperationalError):
            self._faults += 1
        mine = translated(exc)
        if mine is None:
            raise exc
        raise mine from exc

    def _give_back(self, conn: Connection) -> None:
        """Return a connection after use: parked for the next checkout, or to the pool.

        Why: psycopg_pool's ``getconn`` and ``putconn`` are a few dozen Python calls
        each (locks, statistics, waiting-queue and expiry bookkeeping); on a lease
        pair, two checkouts cost the client a third of its CPU. One idle connection
        is therefore kept here and handed to the next checkout of this pool, whatever
        path it takes (every checkout looks here first, and it is checked as any
        pooled connection is, see :meth:`_usable`), so a pool never holds a
        connection back from its own callers. Only an idle one (no transaction
        open) is parked; anything else goes back to the psycopg pool, which resets
        or replaces it. :meth:`unpark` hands it back (closing the pool does).
        """
        if not self._parked and not conn.closed and \
                conn.pgconn.transaction_status == _IDLE:
            with self._parked_lock:
                if not self._parked:
                    self._parked.append(conn)
                    return
        self.pool.putconn(conn)

    def _checkout(self) -> Connection:
        if self._parked:
            with self._parked_lock:
                conn = self._parked.pop() if self._parked else None
            if conn is not None:
                if self._usable(conn) and not _expired(conn):
                    return conn
                # Broken, or past the pool's max_lifetime (which only putconn enforces:
                # a connection parked and reused forever would never be rotated):
                # the pool discards and replaces it.
                self.pool.putconn(conn)
        deadline = time.monotonic() + self._timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolTimeout(f"couldn't get a connection after {self._timeout:.2f} sec")
            try:
                conn = self.pool.getconn(timeout=min(left, RECONNECT_POLL_SECONDS))
            except PoolTimeout:
                continue
            if self._usable(conn):
                return conn
            self.pool.putconn(conn)  # broken: the pool discards and replaces it

    def _usable(self, conn: Connection) -> bool:
        """Whether a pooled connection still works, checked only when in doubt.

        In doubt: the server said something on an idle connection (a closed socket
        or the FATAL a shutdown, crash or ``pg_terminate_backend`` sends reads as
        readable), a fault was seen since its last check, or it sat idle long.
        Otherwise handing it out costs nothing.
        """
        if conn.closed or conn.broken:
            return False
        now = time.monotonic()
        checked_at: float = getattr(conn, "_jobwarden_checked_at", now)
        checked_faults: int = getattr(conn, "_jobwarden_faults", self._faults)
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return False
        if readable or checked_faults != self._faults or now - checked_at > IDLE_CHECK_SECONDS:
            try:
                conn.execute("")
            except psycopg.Error as exc:
                logger.info("discarding a pooled connection that failed its check: %s",
                            _first_line(exc))
                return False
        conn._jobwarden_checked_at = now  # type: ignore[attr-defined]
        conn._jobwarden_faults = self._faults  # type: ignore[attr-defined]
        return True

    @contextlib.contextmanager
    def counting_faults(self) -> Iterator[None]:
        """Count a connection-level failure of a statement run on a caller's connection."""
        try:
            yield
        except psycopg.OperationalError:
            self._faults += 1
            raise
