"""``python -m bench.callcost``: what the call deadlines cost a lease pair's client.

In one process, on one server (a private embedded one, or ``--dsn``), rounds of
``--pairs`` ``with client.lease(name, ttl=30): pass`` pairs, alternating between
a client whose calls have bounds (the defaults: the watchdog armed and disarmed
around every call, db/deadlines.py) and one without (every bound 0: nothing
armed). Reported per pair: the process's CPU time (every thread's, the
watchdog's included) and wall time, and the ratio bounded / unbounded of each,
medians over ``--rounds`` rounds. Interleaving and CPU time keep the figure
readable on a loaded machine, where throughput alone is mostly the load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence

import jobwarden
from jobwarden.db.database import Database
from jobwarden.db.deadlines import CallBounds
from tests.support.postgres import DatabaseFactory, EmbeddedServer

UNBOUNDED = CallBounds(call=0, claim=0, heartbeat=0, record=0, lease=0, migrate=0)


def _round(client: jobwarden.Client, pairs: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per pair."""
    name = f"callcost-{uuid.uuid4().hex[:8]}"
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(pairs):
        with client.lease(name, ttl=30):
            pass
    return (time.process_time() - cpu) / pairs, (time.perf_counter() - wall) / pairs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callcost", description=__doc__)
    parser.add_argument("--dsn", help="a server to use (default: a private embedded one)")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    server = None if args.dsn else EmbeddedServer()
    factory = DatabaseFactory(args.dsn or server.dsn, tag="callcost")  # type: ignore[union-attr]
    dsn = factory.create()
    try:
        bounded = jobwarden.Client(database=Database(dsn, max_size=2, bounds=CallBounds()),
                                   owns_database=True)
        unbounded = jobwarden.Client(database=Database(dsn, max_size=2, bounds=UNBOUNDED),
                                     owns_database=True)
        with bounded, unbounded:
            _round(bounded, 200)  # warm both: connections, prepared statements
            _round(unbounded, 200)
            found: dict[str, list[tuple[float, float]]] = {"bounded": [], "unbounded": []}
            for n in range(args.rounds):
                order = [("bounded", bounded), ("unbounded", unbounded)]
                for label, client in order if n % 2 == 0 else order[::-1]:
                    found[label].append(_round(client, args.pairs))
        medians = {label: (statistics.median(c for c, _ in rows),
                           statistics.median(w for _, w in rows))
                   for label, rows in found.items()}
        result = {
            "pairs_per_round": args.pairs, "rounds": args.rounds,
            "cpu_us_per_pair": {k: round(v[0] * 1e6, 1) for k, v in medians.items()},
            "wall_us_per_pair": {k: round(v[1] * 1e6, 1) for k, v in medians.items()},
            "cpu_ratio": round(medians["bounded"][0] / medians["unbounded"][0], 3),
            "wall_ratio": round(medians["bounded"][1] / medians["unbounded"][1], 3),
        }
        print(json.dumps(result))
        return 0
    finally:
        factory.drop(dsn)
        factory.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
