"""A real PgBouncer in transaction mode, started per test in front of a test database.

PgBouncer refuses to run as root, so when the tests run as root it switches to
the user owning the backend's Unix socket directory (an embedded server) or to
``nobody`` (a TCP server). Tests using it are skipped where PgBouncer is not
installed (the Debian package ``pgbouncer``); everywhere else they run for real.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from tests.support.ports import free_port


class PgBouncer:
    """``pgbouncer`` with ``pool_mode = transaction`` listening on 127.0.0.1:<port>."""

    def __init__(self, backend_dsn: str, *, pool_size: int = 10,
                 max_client_conn: int = 500) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(binary):
            pytest.skip("PgBouncer is not installed (Debian package pgbouncer)")
        params = conninfo.conninfo_to_dict(backend_dsn)
        host = str(params.get("host") or "127.0.0.1")
        port = str(params.get("port") or 5432)
        self.user = str(params.get("user") or "postgres")
        self.dbname = str(params.get("dbname") or "postgres")
        self.dir = Path(tempfile.mkdtemp(prefix="jobwarden-pgbouncer-"))
        self.port = free_port()
        run_as = None
        if os.geteuid() == 0:
            run_as = (Path(host).owner() if host.startswith("/") else "nobody")
            entry = pwd.getpwnam(run_as)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(f"""\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/userlist.txt
pool_mode = transaction
max_client_conn = {max_client_conn}
default_pool_size = {pool_size}
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
""")
        command = [binary, *(["-u", run_as] if run_as else []), str(self.dir / "pgbouncer.ini")]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        self.dsn = conninfo.make_conninfo(host="127.0.0.1", port=self.port, user=self.user,
                                          dbname=self.dbname)
        deadline = time.monotonic() + 20
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "pgbouncer.log").read_text(errors="replace")[-4000:]
        return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
