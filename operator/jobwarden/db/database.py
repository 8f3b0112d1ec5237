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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, LiteralString, cast

import psycopg
import psycopg.errors
from psycopg import generators
from psycopg_pool import ConnectionPool

from jobwarden import errors
from jobwarden.db import queries

# Re-exported: callers (table modules under TYPE_CHECKING, the console, the CLI)
# name these as ``database.Row`` and friends.
from jobwarden.db.basics import _SCHEMA_NAME
from jobwarden.db.basics import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from jobwarden.db.basics import Connection as Connection
from jobwarden.db.basics import Params as Params
from jobwarden.db.basics import Row as Row
from jobwarden.db.basics import channel_name as channel_name
from jobwarden.db.calls import PreparedCall
from jobwarden.db.faults import first_line as _first_line
from jobwarden.db.faults import translate_errors as translate_errors
from jobwarden.db.pool import CONNECT_TIMEOUT_SECONDS as CONNECT_TIMEOUT_SECONDS
from jobwarden.db.pool import IDLE_CHECK_SECONDS as IDLE_CHECK_SECONDS
from jobwarden.db.pool import PREPARED_STATEMENTS_ENV as PREPARED_STATEMENTS_ENV
from jobwarden.db.pool import RECONNECT_POLL_SECONDS as RECONNECT_POLL_SECONDS
from jobwarden.db.pool import Pool
from jobwarden.db.pool import describe_dsn as describe_dsn
from jobwarden.db.pool import env_prepare_threshold as env_prepare_threshold
from jobwarden.db.prepared import PreparedStatements, value_adapter

_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_FATAL = psycopg.pq.ExecStatus.FATAL_ERROR

if TYPE_CHECKING:
    from jobwarden.db.hosts import HostsTable
    from jobwarden.db.jobs import JobsTable
    from jobwarden.db.leases import LeasesTable
    from jobwarden.db.maintenance import MaintenanceTable
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
    ) -> None:
        if not dsn:
            raise errors.ConfigurationError(
                "no database DSN: pass --dsn or set JOBWARDEN_DSN"
            )
        if not _SCHEMA_NAME.fullmatch(schema):
            raise errors.ConfigurationError(
                f"invalid schema name {schema!r}: use letters, digits and underscores, "
                "starting with a letter or underscore (at most 63 characters)"
            )
        self.dsn = dsn
        self.schema = schema
        self.q = queries.for_schema(schema)
        if verify:
            self.check()
        if prepare_threshold == "env":
            prepare_threshold = env_prepare_threshold()
        self.connections = Pool(dsn, name=f"jobwarden-{schema}", min_size=min_size,
                                max_size=max_size, timeout=timeout,
                                application_name=application_name,
                                prepare_threshold=prepare_threshold)
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
            with psycopg.connect(self.dsn, connect_timeout=5, autocommit=True) as conn:
                row = conn.execute("SELECT now()").fetchone()
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        except psycopg.OperationalError as exc:
            raise errors.DatabaseUnavailable(
                f"cannot connect to the database: {_first_line(exc)}"
            ) from exc
        assert row is not None
        return cast(datetime.datetime, row[0])

    def connect(self) -> Connection:
        """A dedicated connection outside the pool (LISTEN, long waits)."""
        return self.connections.connect()

    # -- execution -----------------------------------------------------------------

    def connection(self) -> contextlib.AbstractContextManager[Connection]:
        """A checked pooled connection for the block (see :meth:`Pool.connection`)."""
        return self.connections.connection()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.connection() as conn, conn.transaction():
            yield conn

    def sql(self, name: str) -> LiteralString:
        return self.q[name]  # rendered from the package's own .sql files

    def rows(self, name: str, params: Params | None = None, *,
             conn: Connection | None = None) -> list[Row]:
        if conn is not None:
            with translate_errors(), self.connections.counting_faults():
                return conn.execute(self.sql(name), params).fetchall()
        return self.connections.statement(self.q[name], params, fetch=True)[0]

    def call(self, name: str, params: Params) -> list[Row]:
        """Rows of a hot named query run as a protocol-level prepared statement.

        For the few statements run so often that parsing and planning the call
        itself shows (the lease pair); see ``db/calls.py``, pooler-safe by naming.
        """
        return self.connections.call(self._call(name), params)

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
                          prepared: bool = False) -> list[list[Row]]:
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
                return self._in_one_message(steps, prepared=True)
            except psycopg.errors.InvalidSqlStatementName:
                self.prepared.disable()  # nothing committed: the transaction failed whole
        return self._in_one_message(steps, prepared=False)

    def _in_one_message(self, steps: list[tuple[str, Params | None]], *,
                        prepared: bool) -> list[list[Row]]:
        with self.connection() as conn:
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
            conn: Connection | None = None) -> Row | None:
        found = self.rows(name, params, conn=conn)
        return found[0] if found else None

    def execute(self, name: str, params: Params | None = None, *,
                conn: Connection | None = None) -> int:
        if conn is not None:
            with translate_errors(), self.connections.counting_faults():
                return conn.execute(self.sql(name), params).rowcount
        return self.connections.statement(self.q[name], params, fetch=False)[1]

    def now(self) -> datetime.datetime:
        found = self.row("db_now")
        assert found is not None
        return cast(datetime.datetime, found[0])

    # -- migrations ----------------------------------------------------------------

    def migrate(self) -> list[str]:
        from jobwarden.db import migrations

        with self.connection() as conn:
            return [f"{m.version:04d}_{m.name}" for m in migrations.migrate(conn, self.schema)]

    def pending_migrations(self) -> list[str]:
        from jobwarden.db import migrations

        with self.connection() as conn:
            return [f"{m.version:04d}_{m.name}" for m in migrations.pending(conn, self.schema)]

    def migration_script(self, *, pending_only: bool) -> str:
        from jobwarden.db import migrations

        versions: list[int] | None = None
        if pending_only:
            with self.connection() as conn:
                versions = [m.version for m in migrations.pending(conn, self.schema)]
        return migrations.script(self.schema, pending_only=versions)

    # -- notifications -------------------------------------------------------------

    def notify(self, topic: str, payload: str = "") -> None:
        with self.connection() as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (channel_name(self.schema, topic), payload))

    def listener(self, *topics: str) -> Listener:
        return Listener(self, [channel_name(self.schema, t) for t in topics])


class Listener:
    """A dedicated LISTEN connection that reconnects by itself.

    LISTEN/NOTIFY only ever speeds things up: callers always also poll, so a
    listener that is down (or a pooler that forbids LISTEN) costs latency, never
    correctness. ``wait`` returns the payloads received, or ``[]`` on timeout.
    """

    def __init__(self, db: Database, channels: list[str]) -> None:
        self._db = db
        self._channels = channels
        self._conn: Connection | None = None

    def _ensure(self) -> Connection:
        if self._conn is None or self._conn.closed:
            conn = self._db.connect()
            for channel in self._channels:
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            self._conn = conn
        return self._conn

    def wait(self, timeout: float) -> list[tuple[str, str]]:
        """Block up to ``timeout`` seconds for notifications; raises DatabaseUnavailable."""
        try:
            conn = self._ensure()
            received = [
                (n.channel, n.payload) for n in conn.notifies(timeout=timeout, stop_after=1)
            ]
            # Drain whatever else arrived with the first one without blocking.
            if received:
                received.extend(
                    (n.channel, n.payload) for n in conn.notifies(timeout=0.0)
                )
            return received
        except (psycopg.OperationalError, errors.DatabaseUnavailable) as exc:
            self.close()
            raise errors.DatabaseUnavailable(f"listener lost: {_first_line(exc)}") from exc

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
