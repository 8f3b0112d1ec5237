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
accepting connections again. Every call has a bound (``db/deadlines.py``): one
the server does not answer in time is abandoned, its connection discarded,
and the caller gets ``DatabaseUnavailable``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, LiteralString, NoReturn, Protocol

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from jobwarden import errors
from jobwarden.db.basics import Connection, Params, Row
from jobwarden.db.calls import MISSES_BEFORE_PLAIN, PreparedCall, run_prepared
from jobwarden.db.deadlines import CONNECT_TIMEOUT_SECONDS as CONNECT_TIMEOUT_SECONDS
from jobwarden.db.deadlines import WATCHDOG, CallBounds, Watched, abandoned_error, tcp_options
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
#: The longest a pooled connection's check (an empty query) may go unanswered: a
#: server that answers at all answers it in far less; a slow one costs a reconnect.
CHECK_SECONDS = 2.0
#: A process whose pooled connections went unused this long is at rest: a call then
#: waits up to LEND_WAIT_SECONDS for the lending LISTEN connection (``Pool.lender``)
#: rather than open a pooled connection for itself.
REST_SECONDS = 2.0
LEND_WAIT_SECONDS = 0.5


class Lender(Protocol):
    """A connection that serves pooled calls when free (``database.Listener``)."""

    def lend(self, timeout: float = 0.0) -> Connection | None: ...

    def returned(self, conn: Connection) -> None: ...


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


@contextlib.contextmanager
def bounded(conn: Connection, bound: float) -> Iterator[Connection]:
    """The block's calls on a connection of its own within ``bound`` seconds (0: none).

    Past it the connection is closed and the block raises ``DatabaseUnavailable``;
    driver errors are translated as everywhere (:func:`translate_errors`).
    """
    watched = Watched(conn, bound)
    try:
        with watched, translate_errors():
            yield conn
    finally:
        if watched.abandoned:
            conn.close()


class Pool:
    """Connections to one database: pooled (checked at checkout) or dedicated."""

    def __init__(self, dsn: str, *, name: str, min_size: int, max_size: int, timeout: float,
                 application_name: str, prepare_threshold: int | None,
                 bounds: CallBounds | None = None, max_idle: float = 600.0) -> None:
        self.dsn = dsn
        self._timeout = timeout
        #: The bound of each kind of call (``db/deadlines.py``).
        self.bounds = bounds if bounds is not None else CallBounds.from_env()
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
            "application_name": application_name,
        }
        try:
            if "connect_timeout" not in conninfo.conninfo_to_dict(dsn):
                self._connect_kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
            self._connect_kwargs.update(tcp_options(dsn))
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        #: Bumped whenever a statement failed for a connection-level reason: every
        #: pooled connection last checked before that is checked again at checkout.
        self._faults = 0
        #: When (monotonic) a call or check on this pool was last abandoned: a pooled
        #: connection last checked before that is discarded unchecked (see _usable).
        self._abandoned_at = -math.inf
        #: Prepared calls a server connection did not hold (see ``db/calls.py``);
        #: at MISSES_BEFORE_PLAIN the pool sends their plain text for good.
        self.prepared_misses = 0
        #: At most one idle connection kept out of the psycopg pool for the next
        #: checkout (see :meth:`_give_back`); guarded by ``_parked_lock``.
        self._parked: list[Connection] = []
        self._parked_lock = threading.Lock()
        #: When (monotonic) a connection was last given back (see :meth:`trim`).
        self._used_at = time.monotonic()
        #: A verified LISTEN connection lent for calls between its waits (set by the
        #: ``Listener`` itself; ``database.Listener``), tried before the psycopg pool.
        self.lender: Lender | None = None
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
                max_idle=max_idle,
                configure=self._stamp,
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

    def trim(self, idle_seconds: float) -> bool:
        """Hand the parked connection back to the psycopg pool when no call used one
        for ``idle_seconds``; True when one was handed back.

        Why: a worker at rest calls the database a few times a minute, over its
        lending LISTEN connection (``database.Listener``); a connection kept parked
        would be a server process per idle worker for ever (issue 31: 3.2
        connections per idle worker). Back in the psycopg pool, it is closed after
        ``max_idle`` unused (psycopg_pool shrinks one connection per ``max_idle``
        while it sat idle the whole period), down to ``min_size``; a busy process's
        calls keep theirs.
        """
        if time.monotonic() - self._used_at < idle_seconds or not self._parked:
            return False
        self.unpark()
        return True

    def connect(self, dsn: str | None = None, *,
                application_name: str | None = None) -> Connection:
        """A dedicated connection outside the pool (LISTEN, long waits) to ``dsn`` (default:
        the pool's); the pool's TCP options and application name (unless given). Its
        calls are bounded by the caller (:meth:`bounded`)."""
        with translate_errors():
            return psycopg.connect(dsn or self.dsn, **{
                "connect_timeout": CONNECT_TIMEOUT_SECONDS, **self._connect_kwargs,
                **({"application_name": application_name} if application_name else {})})

    # -- execution -----------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self, bound: float | None = None) -> Iterator[Connection]:
        """A checked pooled connection for the block; waits up to the pool timeout.

        After an outage the pool holds connections the server closed: each one is
        recognised at checkout (see :meth:`_usable`) and replaced, so the first call
        after the server is back succeeds. While no connection can be made the
        caller keeps asking the pool (every ``RECONNECT_POLL_SECONDS``) until its
        timeout, so it resumes as soon as the server accepts connections again.
        The whole block (the wait for a connection included) is one call of
        ``bound`` seconds (default: the ``call`` bound): past it, what waits on the
        connection fails, the connection is discarded, and the block raises
        ``DatabaseUnavailable``.
        """
        bound = self.bounds.call if bound is None else bound
        deadline = self.bounds.deadline(bound)
        with translate_errors():
            conn = self._checkout(deadline)
            token = WATCHDOG.arm(conn, deadline)
            released = False
            try:
                yield conn
            except (psycopg.OperationalError, errors.DatabaseUnavailable) as exc:
                # (DatabaseUnavailable: translated inside the block.)
                if isinstance(exc, psycopg.OperationalError):
                    self._faults += 1
                released = True
                if not self._release(conn, token):
                    raise abandoned_error(bound, exc) from exc
                raise
            finally:
                if not released:
                    self._release(conn, token)

    def bounded(self, conn: Connection,
                bound: float | None = None) -> contextlib.AbstractContextManager[Connection]:
        """The block's calls on a dedicated connection (:meth:`connect`) within ``bound``
        (default: the ``call`` bound); see :func:`bounded`."""
        return bounded(conn, self.bounds.call if bound is None else bound)

    def _release(self, conn: Connection, token: int) -> bool:
        """Disarm the call's deadline and give ``conn`` back; False if it was abandoned.

        An abandoned connection (its socket shut down) is closed first: the pool
        discards a closed connection, and it is never parked.
        """
        in_time = WATCHDOG.disarm(token)
        if not in_time:
            conn.close()
            self._abandoned_at = time.monotonic()
        self._give_back(conn)
        return in_time

    def statement(self, query: LiteralString, params: Params | None, *,
                  fetch: bool, then: bytes | None = None,
                  bound: float | None = None) -> tuple[list[Row], int]:
        """Run one statement on a checked pooled connection: (its rows, its rowcount).

        The path of every named query (``Database.rows``/``row``/``execute``): the
        same checkout, fault counting and error translation as :meth:`connection`,
        written out without context managers, and through one cursor kept per
        pooled connection instead of a new cursor (and its adapters) per
        statement. On a lease pair this path cost the client more than the
        statements' own driver calls. ``fetch=False``: rows are not read ([]).
        ``then``: a statement without parameters run next on the same connection,
        its rows ignored (the enqueue's flush barrier, ``Database.rows_then_flush``).
        ``bound``: the call's bound in seconds (default: the ``call`` bound).
        """
        bound = self.bounds.call if bound is None else bound
        deadline = self.bounds.deadline(bound)
        conn = self._checked_out(deadline)
        token = WATCHDOG.arm(conn, deadline)
        in_time = True
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
            failure = exc
        finally:
            in_time = self._release(conn, token)
        self._failed(failure, in_time, bound)

    def call(self, call: PreparedCall, params: Params, *,
             then: bytes | None = None, bound: float | None = None) -> list[Row]:
        """The rows of one hot named query, run as a protocol-level prepared statement.

        The same checkout, fault counting and error translation as :meth:`statement`;
        see ``db/calls.py`` for why these statements are prepared and why that is
        safe behind a pooler. A statement the server connection lost runs as plain
        text instead (nothing ran the first time). ``then``, ``bound``: as in
        :meth:`statement`.
        """
        if self.prepared_misses >= MISSES_BEFORE_PLAIN:
            return self.statement(call.text, params, fetch=True, then=then, bound=bound)[0]
        bound = self.bounds.call if bound is None else bound
        deadline = self.bounds.deadline(bound)
        conn = self._checked_out(deadline)
        token = WATCHDOG.arm(conn, deadline)
        in_time = True
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
            failure = exc
        finally:
            in_time = self._release(conn, token)
        self._failed(failure, in_time, bound)

    def _checked_out(self, deadline: float) -> Connection:
        """A checked pooled connection (:meth:`_checkout`); a pool timeout translated."""
        try:
            return self._checkout(deadline)
        except PoolTimeout as exc:
            raise _timed_out(exc) from exc

    def _failed(self, exc: psycopg.Error, in_time: bool, bound: float) -> NoReturn:
        """Raise ``exc`` as a Jobwarden error (counted as a fault if the connection's);
        a call the watchdog abandoned (not ``in_time``) says so."""
        if isinstance(exc, psycopg.OperationalError):
            self._faults += 1
            if not in_time:
                raise abandoned_error(bound, exc) from exc
        mine = translated(exc)
        if mine is None:
            raise exc
        raise mine from exc

    def forget_lender(self, lender: Lender) -> None:
        """``lender`` no longer lends (it reconnects, or closed)."""
        if self.lender is lender:
            self.lender = None

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
        lender: Lender | None = getattr(conn, "_jobwarden_lent_by", None)
        if lender is not None:
            # Back to its lender even when that stopped lending while the call ran (it
            # closed or reconnected under the borrower): a lent connection is never
            # the psycopg pool's, and the lender uses it again only once returned.
            lender.returned(conn)
            return
        self._used_at = time.monotonic()
        if not self._parked and not conn.closed and \
                conn.pgconn.transaction_status == _IDLE:
            with self._parked_lock:
                if not self._parked:
                    self._parked.append(conn)
                    return
        self.pool.putconn(conn)

    def _checkout(self, deadline: float = math.inf) -> Connection:
        """A checked connection, waited for up to the pool timeout or ``deadline``
        (the call's), whichever comes first. A lending listener's connection comes
        first (an idle process then opens none of its own)."""
        lender = self.lender
        if lender is not None:
            # The lending LISTEN connection first, when free: a process whose calls it
            # carries keeps no pooled connection (they are unparked by ``trim`` and
            # closed by the pool); at rest, or when the psycopg pool holds none idle,
            # a borrower waits a moment for it rather than open a connection for one
            # call (psycopg_pool's deque of idle ones is read directly: get_stats()
            # builds a dict per call).
            at_rest = time.monotonic() - self._used_at >= REST_SECONDS \
                or not getattr(self.pool, "_pool", None)
            lent = lender.lend(LEND_WAIT_SECONDS if at_rest and not self._parked else 0.0)
            if lent is not None:
                lent._jobwarden_lent_by = lender  # type: ignore[attr-defined]
                return lent
        if self._parked:
            with self._parked_lock:
                conn = self._parked.pop() if self._parked else None
            if conn is not None:
                if self._usable(conn, deadline) and not _expired(conn):
                    return conn
                # Broken, or past the pool's max_lifetime (which only putconn enforces:
                # a connection parked and reused forever would never be rotated):
                # the pool discards and replaces it.
                self.pool.putconn(conn)
        started = time.monotonic()
        give_up = min(started + self._timeout, deadline)
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise PoolTimeout(f"couldn't get a connection after "
                                  f"{time.monotonic() - started:.2f} sec")
            try:
                conn = self.pool.getconn(timeout=min(left, RECONNECT_POLL_SECONDS))
            except PoolTimeout:
                continue
            if self._usable(conn, deadline):
                return conn
            self.pool.putconn(conn)  # broken: the pool discards and replaces it

    def _stamp(self, conn: Connection) -> None:
        """A new pooled connection counts as checked when it was made: one that then
        sits unused through a fault or for IDLE_CHECK_SECONDS (the pool keeps
        ``min_size`` of them) is checked at its first checkout like any other."""
        conn._jobwarden_checked_at = time.monotonic()  # type: ignore[attr-defined]
        conn._jobwarden_faults = self._faults  # type: ignore[attr-defined]

    def _usable(self, conn: Connection, deadline: float = math.inf) -> bool:
        """Whether a pooled connection still works, checked only when in doubt.

        In doubt: the server said something on an idle connection (a closed socket
        or the FATAL a shutdown, crash or ``pg_terminate_backend`` sends reads as
        readable), a fault was seen since its last check, or it sat idle long.
        Otherwise handing it out costs nothing. One last checked before a call or
        check on this pool was abandoned is discarded without a check: the path
        that went silent is likely its path too, and each check of a silent
        connection costs the caller up to CHECK_SECONDS (a healthy one discarded
        costs a reconnect).
        """
        if conn.closed or conn.broken:
            return False
        now = time.monotonic()
        checked_at: float = getattr(conn, "_jobwarden_checked_at", now)
        if checked_at < self._abandoned_at:
            conn.close()  # closed: the pool discards it rather than handing it out again
            return False
        checked_faults: int = getattr(conn, "_jobwarden_faults", self._faults)
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return False
        if readable or checked_faults != self._faults or now - checked_at > IDLE_CHECK_SECONDS:
            # The check is a round trip too: within the call's deadline and at most
            # CHECK_SECONDS (after a silence every pooled connection may be dead, and
            # each would otherwise cost a whole call its bound); the connection of a
            # check that was abandoned is closed, and so discarded.
            token = WATCHDOG.arm(conn, min(deadline, now + CHECK_SECONDS))
            try:
                conn.execute("")
            except psycopg.Error as exc:
                logger.info("discarding a pooled connection that failed its check: %s",
                            _first_line(exc))
                return False
            finally:
                in_time = WATCHDOG.disarm(token)
                if not in_time:
                    conn.close()
                    self._abandoned_at = time.monotonic()
            if not in_time:
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
