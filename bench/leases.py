"""``python -m bench.leases``: what a Jobwarden lease costs, against its two rulers.

Three things in the same run, on the same server, from 1 and 4 client
processes (each on its own name / row / key, so nobody waits on anybody):

* ``lease``    -- ``with client.lease(name, ttl=30): pass``: one acquire (the
  INSERT ... ON CONFLICT takeover statement) and one owner-fenced release (with
  its NOTIFY), two committed writes, through the public API.
* ``advisory`` -- ``pg_try_advisory_lock`` / ``pg_advisory_unlock`` pairs: the
  cheapest mutual exclusion PostgreSQL has (no WAL, no commit), which Jobwarden
  does not use because session locks break behind transaction-mode poolers and
  vanish silently with their connection.
* ``update``   -- single-row autocommit UPDATEs: one committed write, the
  ceiling of anything that must survive a crash.

So a lease pair should cost about two UPDATEs; the gap to advisory locks is
the price of durability, fencing tokens and pooler safety. The client loops and
process handling are ``bench.baselines`` (shared with ``python -m bench``, whose
``lease`` group measures the same pair through the Jobwarden adapter).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence

from bench import baselines, databases
from jobwarden.db.database import Database

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
KINDS: tuple[baselines.Kind, ...] = ("lease", "advisory", "update")
CLIENTS = (1, 4)


def measure(dsn: str, *, seconds: float, repeat: int) -> dict[tuple[str, int], list[float]]:
    """Operations per second per (kind, clients), ``repeat`` runs each, interleaved."""
    with Database(dsn, min_size=1, max_size=1) as db:
        db.migrate()
    baselines.prepare_update_table(dsn)
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeat):
        for clients in CLIENTS:
            for kind in KINDS:
                rate = baselines.rate(
                    kind, dsn, clients=clients, seconds=seconds, system="jobwarden"
                )
                rates.setdefault((kind, clients), []).append(rate)
    return rates


def table(rates: dict[tuple[str, int], list[float]]) -> str:
    lines = ["| per second (median) | 1 client | 4 clients |", "|---|---:|---:|"]
    names = {
        "lease": "Jobwarden lease acquire+release pairs",
        "advisory": "`pg_try_advisory_lock` + `pg_advisory_unlock` pairs",
        "update": "single-row UPDATEs (autocommit)",
    }
    for kind in KINDS:
        cells = [f"{statistics.median(rates[(kind, c)]):,.0f}" for c in CLIENTS]
        lines.append(f"| {names[kind]} | {cells[0]} | {cells[1]} |")

    def ratio(numerator: str, clients: int) -> float:
        return statistics.median(rates[(numerator, clients)]) / statistics.median(
            rates[("lease", clients)]
        )

    lines.append(
        "| one lease pair costs this many UPDATEs | "
        + " | ".join(f"{ratio('update', c):.2f}" for c in CLIENTS)
        + " |"
    )
    lines.append(
        "| advisory pairs per lease pair | "
        + " | ".join(f"{ratio('advisory', c):.1f}" for c in CLIENTS)
        + " |"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.leases", description=__doc__)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("JOBWARDEN_BENCH_DSN", DEFAULT_DSN),
        help="server to use (a maintenance database; a fresh one is created)",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    args = parser.parse_args(argv)
    facts = databases.server_facts(args.dsn)
    with databases.fresh_database(args.dsn, "jw_bench_leases") as dsn:
        rates = measure(dsn, seconds=args.seconds, repeat=args.repeat)
    print(f"cores: {os.cpu_count()}, " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(table(rates))
    print("raw:", {f"{k}x{c}": [round(r) for r in v] for (k, c), v in rates.items()})
    return 0


if __name__ == "__main__":  # guarded: spawned clients re-import the main module
    sys.exit(main())
