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
