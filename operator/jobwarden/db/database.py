"""The ``Database`` facade: named queries, table modules, migrations, notifications.

One :class:`Database` per process and schema. Its connections come from a
:class:`~jobwarden.db.pool.Pool` (``db/pool.py``: checked checkouts, prompt
resumption after an outage); this module runs the queries rendered for its
schema over them. Table modules (``db.jobs``, ...) build on :meth:`Database.rows`
and friends, so the translation of driver errors into :mod:`jobwarden.errors`
happens in one place.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import select
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, LiteralString, cast

import psycopg
import psycopg.errors
from psycopg import generators
from psycopg_pool import ConnectionPool

from jobwarden import errors
from jobwarden.db import queries
from jobwarden.db.basics import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from jobwarden.db.basics import Connection as Connection
from jobwarden.db.basics import Params as Params
from jobwarden.db.basics import Row as Row
from jobwarden.db.basics import channel_name as channel_name

# Re-exported: callers (table modules under TYPE_CHECKING, the console, the CLI)
# name these as ``database.Row`` and friends.
from jobwarden.db.basics import checked_schema
from jobwarden.db.calls import PreparedCall
from jobwarden.db.deadlines import CallBounds, tcp_options
from jobwarden.db.faults import first_line as _first_line
from jobwarden.db.faults import translate_errors as translate_errors
from jobwarden.db.pool import CONNECT_TIMEOUT_SECONDS as CONNECT_TIMEOUT_SECONDS
from jobwarden.db.pool import IDLE_CHECK_SECONDS as IDLE_CHECK_SECONDS
from jobwarden.db.pool import PREPARED_STATEMENTS_ENV as PREPARED_STATEMENTS_ENV
from jobwarden.db.pool import RECONNECT_POLL_SECONDS as RECONNECT_POLL_SECONDS
from jobwarden.db.pool import Pool, bounded
from jobwarden.db.pool import describe_dsn as describe_dsn
from jobwarden.db.pool import env_prepare_threshold as env_prepare_threshold
from jobwarden.db.prepared import PreparedStatements, value_adapter

#: A listener that heard nothing from the server this long checks that it still answers.
LISTENER_CHECK_SECONDS = 30.0

_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_FATAL = psycopg.pq.ExecStatus.FATAL_ERROR

if TYPE_CHECKING:
    from jobwarden.db.hosts import HostsTable
    from jobwarden.db.jobs import JobsTable
    from jobwarden.db.leases import LeasesTable
    from jobwarden.db.maintenance import MaintenanceTable
    from jobwarden.db.migrations import SchemaReleases
    from jobwarden.db.podruns import PodRunsTable
    from jobwarden.db.queues import QueuesTable
    from jobwarden.db.schedules import SchedulesTable


class Database:
    """Named queries and table modules over a pool of connections to one schema."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
        application_name: str = "jobwarden",
        prepare_threshold: int | Literal["env"] | None = "env",
        verify: bool = False,
        bounds: CallBounds | None = None,
        listen_dsn: str | None = None,
        max_idle: float = 600.0,
    ) -> None:
        if not dsn:
            raise errors.ConfigurationError(
                "no database DSN: pass --dsn or set JOBWARDEN_DSN"
            )
        self.dsn = dsn
        self._application_name = application_name
        #: Where LISTEN connections go (None: ``dsn``); see :meth:`connect_listener`.
        self.listen_dsn = listen_dsn or None
        self.schema = checked_schema(schema)
        self.q = queries.for_schema(schema)
        #: The bound of each kind of call (``db/deadlines.py``; ``JOBWARDEN_DB_*_TIMEOUT``).
        self.bounds = bounds if bounds is not None else CallBounds.from_env()
        if verify:
            self.check()
        if prepare_threshold == "env":
            prepare_threshold = env_prepare_threshold()
        self.connections = Pool(dsn, name=f"jobwarden-{schema}", min_size=min_size,
                                max_size=max_size, timeout=timeout,
                                application_name=application_name,
                                prepare_threshold=prepare_threshold, bounds=self.bounds,
                                max_idle=max_idle)
        #: Which pooled connections hold which SQL-level prepared statements.
        self.prepared = PreparedStatements()
        self._calls: dict[str, PreparedCall] = {}
        self._flush_barrier: bytes | None = None

    # -- table modules ---------------------------------------------------------------
    # Each imported on first use, not here: a process loads the tables it works on
    # (an idle worker has no use for pod runs, queues or schedules; docs/benchmarks.md,
    # "Idle worker RSS"), and the import stays out of the package's import cycle.

    @functools.cached_property
    def jobs(self) -> JobsTable:
        from jobwarden.db.jobs import JobsTable

        return JobsTable(self)

    @functools.cached_property
    def hosts(self) -> HostsTable:
        from jobwarden.db.hosts import HostsTable

        return HostsTable(self)

    @functools.cached_property
    def leases(self) -> LeasesTable:
        from jobwarden.db.leases import LeasesTable

        return LeasesTable(self)

    @functools.cached_property
    def maintenance(self) -> MaintenanceTable:
        from jobwarden.db.maintenance import MaintenanceTable

        return MaintenanceTable(self)

    @functools.cached_property
    def queues(self) -> QueuesTable:
        from jobwarden.db.queues import QueuesTable

        return QueuesTable(self)

    @functools.cached_property
    def schedules(self) -> SchedulesTable:
        from jobwarden.db.schedules import SchedulesTable

        return SchedulesTable(self)

    @functools.cached_property
    def podruns(self) -> PodRunsTable:
        from jobwarden.db.podruns import PodRunsTable

        return PodRunsTable(self)

    @property
    def pool(self) -> ConnectionPool[Connection]:
        """The psycopg pool itself (tests and the outage bench hold its connections).

        The connection ``Pool`` keeps parked for its next checkout goes back to it
        first, so whoever takes connections from it directly can take them all.
        """
        self.connections.unpark()
        return self.connections.pool

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        self.connections.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self) -> datetime.datetime:
        """Connect once, fast, and return the database clock.

        Used by the CLI so a bad DSN fails in seconds with a clear message
        instead of waiting for the pool's timeout.
        """
        try:
            conn = psycopg.connect(self.dsn, connect_timeout=5, autocommit=True,
                                   **tcp_options(self.dsn))
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        except psycopg.OperationalError as exc:
            raise errors.DatabaseUnavailable(
                f"cannot connect to the database: {_first_line(exc)}"
            ) from exc
        try:
            with bounded(conn, self.bounds.call):
                row = conn.execute("SELECT now()").fetchone()
        finally:
            conn.close()
        assert row is not None
        return cast(datetime.datetime, row[0])

    def connect(self) -> Connection:
        """A dedicated connection outside the pool (LISTEN, long waits)."""
        return self.connections.connect()

    # -- execution -----------------------------------------------------------------

    def connection(self, bound: float | None = None
                   ) -> contextlib.AbstractContextManager[Connection]:
        """A checked pooled connection for the block (see :meth:`Pool.connection`); the
        block is one call of ``bound`` seconds (default: the ``call`` bound)."""
        return self.connections.connection(bound)

    @contextlib.contextmanager
    def transaction(self, bound: float | None = None) -> Iterator[Connection]:
        with self.connection(bound) as conn, conn.transaction():
            yield conn

    def sql(self, name: str) -> LiteralString:
        return self.q[name]  # rendered from the package's own .sql files

    def rows(self, name: str, params: Params | None = None, *,
             conn: Connection | None = None, bound: float | None = None) -> list[Row]:
        """The rows of a named query; on ``conn`` (the caller's block, bounded by
        whoever opened it), else on a pooled connection within ``bound`` seconds."""
        if conn is not None:
            with translate_errors(), self.connections.counting_faults():
                return conn.execute(self.sql(name), params).fetchall()
        return self.connections.statement(self.q[name], params, fetch=True, bound=bound)[0]

    def call(self, name: str, params: Params, *, bound: float | None = None) -> list[Row]:
        """Rows of a hot named query run as a protocol-level prepared statement.

        For the few statements run so often that parsing and planning the call
        itself shows (the lease pair); see ``db/calls.py``, pooler-safe by naming.
        ``bound``: the call's bound (default: the ``call`` bound).
        """
        return self.connections.call(self._call(name), params, bound=bound)

    def _call(self, name: str) -> PreparedCall:
        """The named query's prepared form (built once per database)."""
        call = self._calls.get(name)
        if call is None:
            call = self._calls[name] = PreparedCall.of(name, self.sql(name))
        return call

    def rows_then_flush(self, name: str, params: Params | None = None) -> list[Row]:
        """The rows of a named query that commits asynchronously, returned once durable.

        For a write others may act on before the writer hears back (an enqueue's
        ``job_insert_one_visible``): it commits without waiting for its WAL flush,
        so it is visible at once, and ``flush_barrier`` then runs on the same
        connection, whose durable commit flushes the WAL past it. The call returns
        only after that: what it wrote is durable when it returns, as with a
        synchronous commit. Not for the caller's own transaction (``conn=``).
        The statement runs prepared at the protocol level (``db/calls.py``: parsed
        and planned once per pooled connection, values bound, pooler-safe).
        """
        if self._flush_barrier is None:
            self._flush_barrier = self.q["flush_barrier"].encode()
        return self.connections.call(self._call(name), params or {},
                                     then=self._flush_barrier)

    def in_one_round_trip(self, steps: list[tuple[str, Params | None]], *,
                          prepared: bool = False,
                          bound: float | None = None) -> list[list[Row]]:
        """Run named queries in one transaction sent as one message; each one's rows.

        ``BEGIN; <each statement, parameters bound here>; COMMIT`` goes out as one
        simple-protocol query, so the transaction costs one round trip instead of one
        per statement plus two: on a busy machine every round trip waits for the
        server process to be scheduled, which is most of a short transaction's time.
        Each statement still takes its own snapshot (read committed), so a later one
        sees what an earlier one waited for. Only for statements that do not need
        each other's results in Python; a failure rolls the whole transaction back.
        ``prepared``: each statement is ``EXECUTE``d from a per-connection ``PREPARE``
        instead (the simple protocol plans every statement every time; see
        :mod:`jobwarden.db.prepared`), with plain text again where a pooler lost it.
        """
        if prepared and self.prepared.enabled:
            try:
                return self._in_one_message(steps, prepared=True, bound=bound)
            except psycopg.errors.InvalidSqlStatementName:
                self.prepared.disable()  # nothing committed: the transaction failed whole
        return self._in_one_message(steps, prepared=False, bound=bound)

    def _in_one_message(self, steps: list[tuple[str, Params | None]], *,
                        prepared: bool, bound: float | None) -> list[list[Row]]:
        with self.connection(bound) as conn:
            if prepared:
                statements = [self.prepared.execute_bytes(conn, name, self.sql(name), params)
                              for name, params in steps]
            else:
                binder = psycopg.ClientCursor(conn)
                statements = [binder.mogrify(self.sql(name), params).encode()
                              for name, params in steps]
            # Sent and read by libpq directly, not through a cursor: a cursor builds
            # column descriptions and per-result state the caller never reads (on the
            # claim, more client work than the message's own quoting).
            pgconn = conn.pgconn
            try:
                pgconn.send_query(b";\n".join([b"BEGIN", *statements, b"COMMIT"]))
                results = conn.wait(generators.execute(pgconn))
                tx = value_adapter(conn)
                found: list[list[Row]] = []
                for result in results:
                    if result.status == _TUPLES_OK:
                        tx.set_pgresult(result)
                        found.append(tx.load_rows(0, result.ntuples, tuple))
                    elif result.status == _FATAL:
                        raise psycopg.errors.error_from_result(result,
                                                               encoding=conn.info.encoding)
                    else:
                        found.append([])
            except BaseException:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            return found[1:-1]

    def row(self, name: str, params: Params | None = None, *,
            conn: Connection | None = None, bound: float | None = None) -> Row | None:
        found = self.rows(name, params, conn=conn, bound=bound)
        return found[0] if found else None

    def execute(self, name: str, params: Params | None = None, *,
                conn: Connection | None = None, bound: float | None = None) -> int:
        if conn is not None:
            with translate_errors(), self.connections.counting_faults():
                return conn.execute(self.sql(name), params).rowcount
        return self.connections.statement(self.q[name], params, fetch=False, bound=bound)[1]

    def now(self) -> datetime.datetime:
        found = self.row("db_now")
        assert found is not None
        return cast(datetime.datetime, found[0])

    # -- migrations ----------------------------------------------------------------

    def migrate(self) -> list[str]:
        from jobwarden.db import migrations

        with self.connection(self.bounds.migrate) as conn:
            return [f"{m.version:04d}_{m.name}" for m in migrations.migrate(conn, self.schema)]

    def pending_migrations(self) -> list[str]:
        from jobwarden.db import migrations

        with self.connection() as conn:
            return [f"{m.version:04d}_{m.name}" for m in migrations.pending(conn, self.schema)]

    def schema_releases(self) -> SchemaReleases:
        """The newest migration applied and the oldest release the schema serves."""
        from jobwarden.db import migrations

        with self.connection() as conn:
            return migrations.schema_releases(conn, self.schema)

    def migration_script(self, *, pending_only: bool) -> str:
        from jobwarden.db import migrations

        versions: list[int] | None = None
        if pending_only:
            with self.connection() as conn:
                versions = [m.version for m in migrations.pending(conn, self.schema)]
        return migrations.script(self.schema, pending_only=versions)

    # -- notifications -------------------------------------------------------------

    def notify(self, topic: str, payload: str = "") -> None:
        self.notify_channel(channel_name(self.schema, topic), payload)

    def notify_channel(self, channel: str, payload: str = "") -> None:
        with self.connection() as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

    def connect_listener(self) -> Connection:
        """A dedicated connection for LISTEN: to ``listen_dsn`` when set (a direct DSN
        beside a transaction-mode pooler's, which loses notifications), else as
        :meth:`connect`, its application name ending in `` listen`` (which server
        connections are LISTENs shows in ``pg_stat_activity``)."""
        return self.connections.connect(self.listen_dsn,
                                        application_name=self._application_name[:56] + " listen")

    def listener(self, *topics: str, lend: bool = False) -> Listener:
        """A LISTEN connection for ``topics``; ``lend``: once verified it also serves
        this database's pooled calls between its waits (see :class:`Listener`)."""
        return Listener(self, [channel_name(self.schema, t) for t in topics], lend=lend)


def _close_pipe(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Listener:
    """A dedicated LISTEN connection that reconnects by itself.

    LISTEN/NOTIFY only ever speeds things up: callers always also poll, so a
    listener that is down (or a pooler that forbids LISTEN) costs latency, never
    correctness. ``wait`` returns the payloads received, or ``[]`` on timeout.

    A connection that went silent (the server or a pooler stopped answering,
    sockets open) would hear nothing for ever and never reconnect: after
    ``LISTENER_CHECK_SECONDS`` without a word from the server, ``wait`` asks it
    for one (an empty query within the ``call`` bound), and a listener whose
    check was not answered reconnects.

    :meth:`verify` proves that NOTIFYs reach this connection: behind a
    transaction-mode pooler (PgBouncer) LISTEN is accepted and then hears
    nothing, and a caller that slows its polling while it "listens" would miss
    every wake-up. The connection goes to the database's ``listen_dsn`` when one
    is set (a direct DSN beside a pooler's).

    A verified listener made with ``lend=True`` also serves the pool (issue 31:
    one connection per process at rest): between its waits any thread may run
    calls on it (:meth:`lend`), so an idle worker's few calls a minute need no
    pooled connection of their own. ``wait`` holds the connection only to read
    what arrived, never while it blocks; a NOTIFY that arrives during a
    borrower's call is kept by psycopg and read at once after it.
    """

    def __init__(self, db: Database, channels: list[str], *, lend: bool = False) -> None:
        self._db = db
        self._channels = channels
        self._conn: Connection | None = None
        #: When (monotonic) the server was last heard from on this connection.
        self._heard_at = 0.0
        #: This connection's own probe channel (see :meth:`verify`).
        self._probe = channel_name(db.schema, f"probe_{uuid.uuid4().hex[:12]}")
        #: Whether a probe came back on the current connection (False after a reconnect).
        self.verified = False
        #: Whether a probe was sent for the current connection (see :meth:`verify`).
        self.probe_sent = False
        #: Notifications that arrived while a probe was awaited (returned by ``wait``).
        self._pending: list[tuple[str, str]] = []
        #: Held by whoever uses the connection: a borrower's call, or ``wait`` reading.
        self._use = threading.Lock()
        #: Lend the connection to the pool once verified (never a ``listen_dsn``'s:
        #: the pool's calls go where the pool's DSN says).
        self._lend = lend and not db.listen_dsn
        #: Written by a borrower that left notifications behind: wakes ``wait``.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        weakref.finalize(self, _close_pipe, self._wake_r, self._wake_w)

    def _ensure(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self.verified = self.probe_sent = False
            self._db.connections.forget_lender(self)
            conn = self._db.connect_listener()
            try:
                with self._db.connections.bounded(conn):
                    # One message, so one transaction, whatever the number of channels.
                    conn.execute(psycopg.sql.SQL("; ").join(
                        psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel))
                        for channel in [*self._channels, self._probe]))
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._heard_at = time.monotonic()
        return self._conn

    def verify(self, timeout: float) -> bool:
        """Whether a NOTIFY sent through the pool reaches this connection within
        ``timeout`` seconds (it LISTENs first). A transaction-mode pooler's LISTEN
        never hears it: the caller then knows to poll. Raises DatabaseUnavailable."""
        try:
            with self._use:
                conn = self._ensure()
            if self.verified:
                return True
            self._db.notify_channel(self._probe, "probe")
            self.probe_sent = True
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                with self._use:
                    notes = list(conn.notifies(timeout=min(left, 0.1), stop_after=1))
                heard = False
                for note in notes:
                    self._heard_at = time.monotonic()
                    if note.channel == self._probe:
                        heard = True
                    else:
                        self._pending.append((note.channel, note.payload))
                if heard:
                    self._verified()
                    return True
            return False
        except (psycopg.OperationalError, errors.DatabaseUnavailable) as exc:
            self.close()
            raise errors.DatabaseUnavailable(f"listener lost: {_first_line(exc)}") from exc

    def wait(self, timeout: float) -> list[tuple[str, str]]:
        """Block up to ``timeout`` seconds for notifications; raises DatabaseUnavailable."""
        if self._pending:
            received, self._pending = self._pending, []
            return received
        try:
            with self._use:
                conn = self._ensure()
                fileno = conn.fileno()
            # Blocks without the connection: a borrower may run a call meanwhile.
            select.select([fileno, self._wake_r], [], [], timeout)
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 64)
            with self._use:
                conn = self._ensure()
                received = [(n.channel, n.payload) for n in conn.notifies(timeout=0.0)]
                if received:
                    self._heard_at = time.monotonic()
                elif time.monotonic() - self._heard_at > LISTENER_CHECK_SECONDS:
                    with self._db.connections.bounded(conn):
                        conn.execute("")
                    self._heard_at = time.monotonic()
            if any(channel == self._probe for channel, _payload in received):
                self._verified()  # a probe that came back after verify() gave up
            return [(channel, payload) for channel, payload in received
                    if channel != self._probe]
        except (psycopg.OperationalError, errors.DatabaseUnavailable, OSError,
                ValueError) as exc:
            self.close()
            raise errors.DatabaseUnavailable(f"listener lost: {_first_line(exc)}") from exc

    def _verified(self) -> None:
        self.verified = True
        if self._lend:
            self._db.connections.lender = self

    # -- lending to the pool ---------------------------------------------------------

    def lend(self, timeout: float = 0.0) -> Connection | None:
        """The listening connection for one call, if it is verified and free (within
        ``timeout`` seconds); else None.

        Give it back with :meth:`returned` (the pool does, see ``Pool._give_back``).
        """
        conn = self._conn
        if not self.verified or conn is None or conn.closed or conn.broken:
            return None
        if not (self._use.acquire(timeout=timeout) if timeout > 0
                else self._use.acquire(blocking=False)):
            return None
        if conn is not self._conn or conn.closed:
            self._use.release()
            return None
        return conn

    def returned(self, conn: Connection) -> None:
        """A borrower is done: the server answered (no silence check needed), and a
        NOTIFY psycopg read during the call is waiting (wake ``wait`` to read it)."""
        self._heard_at = time.monotonic()
        backlog = getattr(conn, "_notifies_backlog", None)
        self._use.release()
        if backlog or conn.closed:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"x")

    def close(self) -> None:
        self.verified = self.probe_sent = False
        self._db.connections.forget_lender(self)
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
