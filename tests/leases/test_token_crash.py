"""Fencing tokens never go backwards across a server crash (issue 16), on a private server.

Each acquisition commits durably (the token's nextval is in its WAL); a
release commits asynchronously and may be forgotten by a crash, which only
leaves the lease to expire. The crash here comes right after an
asynchronous release with the WAL writer stopped, so whatever was not
flushed is really gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from jobwarden.db.database import Database
from tests.support.postgres import EmbeddedServer, private_server, walwriter_pid

pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with private_server() as own:
        yield own


def test_a_token_handed_out_before_a_crash_is_never_handed_out_again(
        server: EmbeddedServer) -> None:
    handed: list[int] = []
    with Database(server.dsn, min_size=1, max_size=1) as db:
        for n in range(40):  # more than one sequence log batch (32 values)
            name = f"lease-{n % 3}"
            got = db.leases.try_acquire(name=name, owner=f"owner-{n}", ttl_seconds=30)
            assert got.acquired and got.token is not None
            handed.append(got.token)
            assert db.leases.release(name=name, owner=f"owner-{n}", token=got.token)
        last = db.leases.try_acquire(name="lease-0", owner="last", ttl_seconds=1)
        assert last.acquired and last.token is not None
        handed.append(last.token)
        walwriter = walwriter_pid(server.dsn)
        os.kill(walwriter, signal.SIGSTOP)
        try:
            assert db.leases.release(name="lease-0", owner="last", token=last.token)
            server.crash()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(walwriter, signal.SIGKILL)
    assert handed == sorted(set(handed))  # strictly increasing before the crash
    server.start()
    with Database(server.dsn, min_size=1, max_size=1) as db:
        after: list[int] = []
        for name in ("lease-0", "lease-1", "lease-2"):
            deadline = time.monotonic() + 30
            while True:  # lease-0's release may be forgotten: it lapses after its ttl
                got = db.leases.try_acquire(name=name, owner=f"after-{name}", ttl_seconds=30)
                if got.acquired:
                    break
                assert time.monotonic() < deadline, f"{name} never became free"
                time.sleep(0.1)
            assert got.token is not None
            after.append(got.token)
    assert min(after) > max(handed), (handed[-3:], after)


def test_acquisitions_made_while_nothing_else_flushes_the_wal_survive_a_crash(
        server: EmbeddedServer) -> None:
    """Every acquire's own commit reaches disk before its holder hears the token.

    The WAL writer is stopped first, so from then on only a synchronous commit
    flushes WAL; the 40 lease pairs then draw more than one sequence log batch
    (32 values), so a crash that forgot them would restart the token sequence
    below tokens already handed out. The canary, an asynchronous commit made
    last, shows the crash really forgot what was not flushed: an acquire that
    committed asynchronously would have been forgotten with it, and this test
    would fail on the tokens.
    """
    import jobwarden

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE crash_canary (n integer)")
    handed: list[int] = []
    names = [f"crash-{n}" for n in range(3)]
    with jobwarden.Client(server.dsn, max_connections=1) as client:
        for name in names:  # rows exist, connection warm
            with client.lease(name, ttl=30) as lease:
                handed.append(lease.token)
        walwriter = walwriter_pid(server.dsn)
        os.kill(walwriter, signal.SIGSTOP)
        try:
            for n in range(40):
                with client.lease(names[n % 3], ttl=2) as lease:
                    handed.append(lease.token)
            with client.db.connection() as conn, conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")
                conn.execute("INSERT INTO crash_canary VALUES (1)")
            server.crash()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(walwriter, signal.SIGKILL)
    assert handed == sorted(set(handed))
    server.start()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        canary = conn.execute("SELECT count(*) FROM crash_canary").fetchone()
    assert canary == (0,), "the crash kept an unflushed commit: this test proves nothing"
    after: list[int] = []
    with jobwarden.Client(server.dsn, max_connections=1) as client:
        for name in names:  # the last releases may be forgotten: those lapse at 2 s
            lease = client.lease(name, ttl=30, wait=30).try_acquire()
            assert lease is not None, f"{name} never became free"
            after.append(lease.token)
            lease.release()
    assert min(after) > max(handed), (handed[-3:], after)
