"""Connection pool, query execution and error translation.

One :class:`Database` per process and schema. It owns a psycopg connection pool
(autocommit: every named query is its own transaction unless a table module
opens one explicitly) and the queries rendered for its schema. Table modules
(``db.jobs``, ...) build on :meth:`Database.rows` and friends, so the
translation of driver errors into :mod:`jobwarden.errors` happens in one place.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import select
import time
from collections.abc import Iterator
from typing import Any, Literal, LiteralString, cast

import psycopg
import psycopg.errors
from psycopg import conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

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
from jobwarden.db.faults import first_line as _first_line
from jobwarden.db.faults import translate_errors as translate_errors

logger = logging.getLogger(__name__)

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


PREPARED_STATEMENTS_ENV = "JOBWARDEN_PREPARED_STATEMENTS"


def env_prepare_threshold() -> int | None:
    """Server-side prepared statements: off unless ``JOBWARDEN_PREPARED_STATEMENTS`` says.

    Off by default because a transaction-mode pooler (PgBouncer before 1.21, or
    1.21+ without ``max_prepared_statements``) hands each transaction to any
    server connection, where psycopg's ``_pg3_N`` statement does not exist. ``on``
    prepares a query after 5 runs (psycopg's default); a number sets that count
    (0: prepare at once); ``off`` never prepares.
    """
    raw = os.environ.get(PREPARED_STATEMENTS_ENV, "").strip().lower()
    if raw in ("", "off", "false", "no", "none"):
        return None
    if raw in ("on", "true", "yes"):
        return 5
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.ConfigurationError(
            f"{PREPARED_STATEMENTS_ENV}={raw!r}: use on, off or a number of runs (0 or more)")
    return value


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


class Database:
    """A pool of connections to one Jobwarden schema."""

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
        self._timeout = timeout
        if verify:
            self.check()
        if prepare_threshold == "env":
            prepare_threshold = env_prepare_threshold()
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
        try:
            self.pool: ConnectionPool[Connection] = ConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                kwargs=self._connect_kwargs,
                open=False,
                name=f"jobwarden-{schema}",
                # Give up a failed background connect at once: the caller's own loop in
                # connection() asks again every RECONNECT_POLL_SECONDS (the pool's
                # retries back off exponentially from 1 s, too slow to resume promptly).
                reconnect_timeout=0,
            )
        except psycopg.ProgrammingError as exc:
            raise errors.ConfigurationError(f"invalid DSN: {_first_line(exc)}") from exc
        self.pool.open(wait=False)
        # Table modules, imported here to avoid import cycles at package import.
        from jobwarden.db import hosts as _hosts
        from jobwarden.db import jobs as _jobs
        from jobwarden.db import leases as _leases
        from jobwarden.db import maintenance as _maintenance
        from jobwarden.db import podruns as _podruns
        from jobwarden.db import queues as _queues
        from jobwarden.db import schedules as _schedules

        self.jobs = _jobs.JobsTable(self)
        self.hosts = _hosts.HostsTable(self)
        self.leases = _leases.LeasesTable(self)
        self.maintenance = _maintenance.MaintenanceTable(self)
        self.queues = _queues.QueuesTable(self)
        self.schedules = _schedules.SchedulesTable(self)
        self.podruns = _podruns.PodRunsTable(self)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        self.pool.close()

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
                self.pool.putconn(conn)

    def _checkout(self) -> Connection:
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
    def transaction(self) -> Iterator[Connection]:
        with self.connection() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def _counting_faults(self) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError:
            self._faults += 1
            raise

    def sql(self, name: str) -> LiteralString:
        return self.q[name]  # rendered from the package's own .sql files

    def rows(self, name: str, params: Params | None = None, *,
             conn: Connection | None = None) -> list[Row]:
        if conn is not None:
            with translate_errors(), self._counting_faults():
                return conn.execute(self.sql(name), params).fetchall()
        with self.connection() as c:
            return c.execute(self.sql(name), params).fetchall()

    def row(self, name: str, params: Params | None = None, *,
            conn: Connection | None = None) -> Row | None:
        found = self.rows(name, params, conn=conn)
        return found[0] if found else None

    def execute(self, name: str, params: Params | None = None, *,
                conn: Connection | None = None) -> int:
        if conn is not None:
            with translate_errors(), self._counting_faults():
                return conn.execute(self.sql(name), params).rowcount
        with self.connection() as c:
            return c.execute(self.sql(name), params).rowcount

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
