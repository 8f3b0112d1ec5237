"""``python -m bench.outage``: how soon callers resume after the database is back.

On a private embedded PostgreSQL (started here, in a temp dir), ``--cycles``
times: stop the server, leave a caller blocked on the pool (``db.now()``) for
``--down`` seconds, start the server, and time from ``pg_ctl start`` returning
(the server accepts connections) to the caller's success. Then the same for a
restart with a warm pool (every pooled connection stale): the time of the first
call after the restart. Issue #12's target is under 1 s; before the fix the
blocked caller waited out the pool timeout (10 s) and stale pools failed 2-3
calls. Nothing is asserted (tests/db/test_outages.py specifies the behaviour).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence

from jobwarden.db.database import Database
from tests.support.postgres import EmbeddedServer  # the test suite's private server


def blocked_caller(server: EmbeddedServer, down: float) -> float:
    with Database(server.dsn, min_size=0, max_size=2, timeout=30) as db:
        server.stop()
        done: dict[str, float] = {}

        def call() -> None:
            db.now()
            done["at"] = time.monotonic()

        thread = threading.Thread(target=call)
        thread.start()
        threading.Event().wait(down)  # the outage's length, not a wait for a state
        server.start()
        accepting = time.monotonic()
        thread.join(40)
        return done["at"] - accepting


def stale_pool(server: EmbeddedServer) -> float:
    with Database(server.dsn, min_size=3, max_size=3) as db:
        held = [db.pool.getconn(timeout=10) for _ in range(3)]
        for conn in held:
            db.pool.putconn(conn)
        server.restart()
        started = time.monotonic()
        db.now()
        return time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--down", type=float, default=2.0, help="seconds the server stays down")
    args = parser.parse_args(argv)
    server = EmbeddedServer()
    try:
        server.migrated()
        blocked = [blocked_caller(server, args.down) for _ in range(args.cycles)]
        stale = [stale_pool(server) for _ in range(args.cycles)]
    finally:
        server.close()
    for name, values in (("blocked caller resumed after the server accepted", blocked),
                         ("first call after a restart with a stale pool", stale)):
        print(f"{name}: median {statistics.median(values) * 1000:.0f} ms, "
              f"max {max(values) * 1000:.0f} ms ({len(values)} cycles)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
