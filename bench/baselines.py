"""What the database itself can do, measured in the same run as the systems.

A job queue that commits once per job can never beat the server's own rate of
tiny committed writes, so the single-row UPDATE rate (autocommit, fsync as the
server is configured, each client on its own row) is the ruler every
throughput is held against. Advisory lock/unlock pairs are the ruler for
leases: the cheapest mutual exclusion PostgreSQL offers (no WAL at all),
which Jobwarden cannot use because session locks break behind
transaction-mode poolers, but which tells what a lease costs on top.

Each client is its own process (no GIL, no shared sockets):
all open their connection, meet at a barrier, then loop for a fixed time.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import time
from collections.abc import Callable, Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Literal

import psycopg

from bench import adapters

Kind = Literal["update", "advisory", "lease"]

# Rows (and lock keys) are per client, so clients never wait on each other.
_ROWS = 64
_UPDATE = "UPDATE bench_counter SET n = n + 1 WHERE id = %s"
_LOCK_BASE = 7_000_000


def prepare_update_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_counter"
            " (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)"
        )
        conn.execute(
            "INSERT INTO bench_counter (id) SELECT generate_series(0, %s) ON CONFLICT DO NOTHING",
            (_ROWS - 1,),
        )


@contextlib.contextmanager
def _open(kind: Kind, dsn: str, system: str, index: int) -> Iterator[Callable[[], None]]:
    if kind == "lease":
        with adapters.load(system).lease_cycle(dsn, index) as cycle:
            yield cycle
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        if kind == "update":

            def update() -> None:
                cur.execute(_UPDATE, (index,), prepare=True)

            yield update
        else:
            key = _LOCK_BASE + index

            def lock_pair() -> None:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (key,), prepare=True)
                row = cur.fetchone()
                if not row or row[0] is not True:
                    raise RuntimeError(f"advisory lock {key} unexpectedly busy")
                cur.execute("SELECT pg_advisory_unlock(%s)", (key,), prepare=True)

            yield lock_pair


def _client(
    kind: Kind,
    dsn: str,
    system: str,
    index: int,
    seconds: float,
    barrier: Barrier,
    results: Queue[tuple[int, float] | str],
) -> None:
    try:
        with _open(kind, dsn, system, index) as op:
            for _ in range(10):  # connection warm, statements prepared
                op()
            barrier.wait(timeout=60)
            count = 0
            started = time.perf_counter()
            deadline = started + seconds
            now = started
            while now < deadline:
                op()
                count += 1
                now = time.perf_counter()
            results.put((count, now - started))
    except Exception as exc:
        with contextlib.suppress(Exception):
            barrier.abort()
        results.put(f"{type(exc).__name__}: {exc}")


def _context() -> multiprocessing.context.ForkServerContext:
    """Clients fork from a server process that has already imported psycopg: on a
    busy two-core machine a spawned interpreter per client costs seconds, and
    forking the harness itself (threads, open connections) is not safe."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["bench.baselines"])
    return ctx


def rate(kind: Kind, dsn: str, *, clients: int, seconds: float, system: str = "") -> float:
    """Operations per second summed over ``clients`` concurrent processes."""
    ctx = _context()
    barrier = ctx.Barrier(clients)
    results: Queue[tuple[int, float] | str] = ctx.Queue()
    procs = [
        ctx.Process(
            target=_client,
            args=(kind, dsn, system, index, seconds, barrier, results),
            daemon=True,
        )
        for index in range(clients)
    ]
    for proc in procs:
        proc.start()
    outcomes: list[tuple[int, float] | str] = []
    deadline = time.monotonic() + seconds + 120
    try:
        while len(outcomes) < clients:
            try:
                outcomes.append(results.get(timeout=0.5))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    outcomes.append(f"client process ended with {dead or 'a timeout'}")
                    break
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    errors = [o for o in outcomes if isinstance(o, str)]
    if errors:
        raise RuntimeError(f"{kind} client failed: {errors[0]}")
    return sum(o[0] / o[1] for o in outcomes if not isinstance(o, str))
