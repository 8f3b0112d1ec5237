"""A fleet of worker processes on one PostgreSQL: ``python -m bench.fleet``.

Issue 31. What a fleet of ``jobwarden worker`` processes costs one database,
and how its throughput grows with it. Each worker is a real process started as
a user starts one (``jobwarden worker --concurrency C``, every other setting
its default); a pod is simulated by a process (the machine is the limit, not
Kubernetes). The jobs are no-ops (``bench/fleetjobs.py``). Figures, each with
the load average beside it:

- **idle**: for each fleet size, transactions/s per worker (``pg_stat_database``
  xact_commit + xact_rollback over a window) and server connections per worker
  (``pg_stat_activity``) with no job anywhere;
- **latency**: a trickle of single enqueues into the idle fleet, enqueue to claim
  on the database clock (``claimed_at - run_at``), p50/p99;
- **drain**: ``--jobs`` no-op jobs stored in one statement, drained by the fleet,
  on one queue and spread over four (every worker serves the four); jobs/s as a
  ratio to the ruler, one process at ``--concurrency`` measured in the same run;
- **in flight**: every slot of the fleet holding a claim, transactions/s and the
  heartbeat and reaper statements per 1,000 claims in flight;
- **curve**: throughput of processes x slots (``--curve``);
- **pgbouncer**: the largest fleet through a transaction-mode PgBouncer of
  ``--bouncer-pool`` server connections, without and with a direct LISTEN DSN
  (``JOBWARDEN_LISTEN_DSN``): server connections, idle transactions/s, latency.

The server is a private embedded PostgreSQL (``max_connections`` raised for the
fleet, ``pg_stat_statements`` loaded) unless ``--dsn`` names one. ``--source
DIR`` runs another checkout's ``operator/`` (e.g. main before a change) for the
idle figures of a ``--before`` fleet in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

REPO = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))

APP = "bench.fleetjobs"
NOOP = "bench.fleetjobs:noop"
HOLD = "bench.fleetjobs:hold"
QUEUES = ("q0", "q1", "q2", "q3")


def _server(dsn: str | None) -> tuple[str, Any]:
    if dsn:
        return dsn, None
    from tests.support.postgres import EmbeddedServer

    server = EmbeddedServer()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_connections = 1200")
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    server.restart()
    return server.dsn, server


def _database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = conninfo.make_conninfo(admin, dbname=name)
    from jobwarden.db.database import Database

    with Database(dsn, min_size=1, max_size=1) as db:
        db.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return dsn


def _one(dsn: str, query: str, params: Sequence[Any] = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


def _xacts(admin: str, name: str) -> int:
    return int(_one(admin, "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = %s", (name,)))


def _connections(admin: str, name: str, like: str = "%") -> int:
    return int(_one(admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                           "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
                           "AND application_name LIKE %s", (name, like)))


def _load() -> float:
    return round(os.getloadavg()[0], 1)


class Fleet:
    """``size`` ``jobwarden worker`` processes, stopped (SIGTERM) on exit."""

    def __init__(self, dsn: str, size: int, *, concurrency: int, tag: str,
                 source: str | None = None, queues: Sequence[str] = QUEUES,
                 env: dict[str, str] | None = None, extra: Sequence[str] = ()) -> None:
        path = [str(REPO)] + ([str(Path(source) / "operator")] if source else [])
        full_env = {**os.environ, "JOBWARDEN_DSN": dsn, "PYTHONPATH": os.pathsep.join(
            path[::-1]), **(env or {})}
        self.command = [sys.executable, "-m", "jobwarden", "worker", "--app", APP,
                        "--concurrency", str(concurrency), "--queues", ",".join(queues),
                        *extra]
        self.env, self.tag, self.size = full_env, tag, size
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, dsn: str, batch: int = 25, timeout: float = 600) -> None:
        """Start the processes ``batch`` at a time, each batch registered before the
        next starts (200 processes starting at once on two cores time out)."""
        while len(self.procs) < self.size:
            for n in range(len(self.procs), min(len(self.procs) + batch, self.size)):
                self.procs.append(subprocess.Popen(
                    [*self.command, "--host", f"{self.tag}-{n}"], env=self.env, cwd=REPO,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.wait_registered(dsn, timeout)

    def wait_registered(self, dsn: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while _one(dsn, "SELECT count(*) FROM jobwarden.workers") < len(self.procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("the fleet did not come up")
            time.sleep(1)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def fleet(dsn: str, size: int, **options: Any) -> Iterator[Fleet]:
    running = Fleet(dsn, size, **options)
    try:
        running.start(options.get("env", {}).get("JOBWARDEN_DSN", dsn))
        yield running
    finally:
        running.stop()


def idle(admin: str, name: str, size: int, *, settle: float, window: float,
         like: str = "%") -> dict[str, float]:
    """Transactions/s and server connections per worker of an idle fleet."""
    time.sleep(settle)  # past start-up: registration, the pool's first connections
    before, started = _xacts(admin, name), time.monotonic()
    samples = []
    while time.monotonic() - started < window:
        time.sleep(min(5.0, window / 6))
        samples.append(_connections(admin, name, like))
    spent = time.monotonic() - started
    return {"workers": size, "xact_per_s_per_worker":
            round((_xacts(admin, name) - before) / spent / size, 3),
            "connections_per_worker": round(statistics.mean(samples) / size, 2),
            "load": _load()}


def _clear(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM jobwarden.jobs")


def latency(dsn: str, *, jobs: int, gap: float) -> dict[str, float]:
    """Enqueue to claim (database clock) of single enqueues into an idle fleet."""
    import jobwarden

    _clear(dsn)
    with jobwarden.Client(dsn) as client:
        ids = []
        for _ in range(jobs):
            ids.append(client.enqueue(NOOP, queue=QUEUES[0]).id)
            time.sleep(gap)
    _wait_done(dsn, jobs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        waits = sorted(float(r[0]) for r in conn.execute(
            "SELECT extract(epoch FROM claimed_at - run_at) FROM jobwarden.jobs"))
    return {"p50_ms": round(1000 * statistics.median(waits), 1),
            "p99_ms": round(1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))], 1),
            "load": _load()}


def _wait_done(dsn: str, total: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while _one(dsn, "SELECT count(*) FROM jobwarden.jobs WHERE status = 'completed'") < total:
        if time.monotonic() > deadline:
            raise RuntimeError("the jobs did not finish")
        time.sleep(0.2)


def drain(dsn: str, *, jobs: int, queues: Sequence[str]) -> dict[str, float]:
    """Store ``jobs`` no-ops in one statement (spread over ``queues``); jobs/s until
    the last finished, on the database clock."""
    import jobwarden

    _clear(dsn)
    with jobwarden.Client(dsn) as client:
        per = jobs // len(queues)
        for queue in queues:
            client.enqueue_many(NOOP, [None] * per, queue=queue)
    _wait_done(dsn, per * len(queues))
    seconds = float(_one(dsn, "SELECT extract(epoch FROM max(finished_at) - min(created_at)) "
                              "FROM jobwarden.jobs"))
    return {"jobs": per * len(queues), "jobs_per_s": round(per * len(queues) / seconds, 1),
            "load": _load()}


def in_flight(admin: str, name: str, dsn: str, *, claims: int,
              window: float) -> dict[str, float]:
    """Every slot holding a claim: transactions/s, heartbeat and reaper statements/s,
    each per 1,000 claims in flight."""
    import jobwarden

    _clear(dsn)
    with jobwarden.Client(dsn) as client:
        client.enqueue_many(HOLD, [{"seconds": window + 30}] * claims, queue=QUEUES[0])
    deadline = time.monotonic() + 300
    while _one(dsn, "SELECT count(*) FROM jobwarden.jobs WHERE status = 'processing'") < claims:
        if time.monotonic() > deadline:
            raise RuntimeError("not every claim in flight")
        time.sleep(0.5)
    time.sleep(6)  # one heartbeat interval: every slot's loop is running
    _one(dsn, "SELECT pg_stat_statements_reset()")
    before, started = _xacts(admin, name), time.monotonic()
    time.sleep(window)
    spent = time.monotonic() - started
    xacts = (_xacts(admin, name) - before) / spent
    with psycopg.connect(dsn, autocommit=True) as conn:
        calls = dict(conn.execute(
            "SELECT CASE WHEN query LIKE '%%heartbeat_at = now()%%' THEN 'heartbeat' "
            "WHEN query LIKE '%%WITH stale AS%%' THEN 'reaper' ELSE 'other' END, "
            "sum(calls) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) GROUP BY 1").fetchall())
    per = 1000 / claims
    return {"claims": claims, "xact_per_s_per_1000": round(xacts * per, 1),
            "heartbeat_per_s_per_1000": round(float(calls.get("heartbeat", 0)) / spent * per, 1),
            "reaper_per_s_per_1000": round(float(calls.get("reaper", 0)) / spent * per, 1),
            "load": _load()}


def _bouncer(dsn: str, pool: int) -> Any:
    from tests.support.pgbouncer import PgBouncer

    # Clients: every worker's pooled connections at a burst (up to 8) and its LISTEN.
    return PgBouncer(dsn, pool_size=pool, max_client_conn=5000)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="a server (default: a private embedded one)")
    parser.add_argument("--sizes", default="10,50,200", help="fleet sizes (processes)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=4000, help="no-op jobs per drain")
    parser.add_argument("--window", type=float, default=60.0, help="idle window, seconds")
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--trickle", type=int, default=40, help="jobs of the latency trickle")
    parser.add_argument("--curve", default="1x1,1x4,2x4,4x4,8x4,16x4",
                        help="processes x slots for the concurrency curve ('' = none)")
    parser.add_argument("--before", type=int, default=0,
                        help="also an idle fleet of this size running --source")
    parser.add_argument("--source", help="a checkout whose operator/ the --before fleet runs")
    parser.add_argument("--bouncer", type=int, default=0,
                        help="fleet size behind PgBouncer (0 = skip)")
    parser.add_argument("--bouncer-pool", type=int, default=40)
    parser.add_argument("--idle-only", action="store_true",
                        help="per fleet size only the idle figures (no latency, drain, "
                             "in-flight)")
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args(argv)
    admin, server = _server(args.dsn)
    results: dict[str, Any] = {"concurrency": args.concurrency, "cpus": os.cpu_count(),
                               "started_load": _load()}

    def report(key: str, value: Any) -> None:
        results.setdefault(key, []).append(value)
        print(key, json.dumps(value), flush=True)
        if args.json_path:  # as it goes: a step that fails keeps the figures before it
            Path(args.json_path).write_text(json.dumps(results, indent=1) + "\n")

    try:
        name = "bench_fleet"
        dsn = _database(admin, name)
        # The ruler: one process, measured in this run.
        with fleet(dsn, 1, concurrency=args.concurrency, tag="ruler"):
            ruler = drain(dsn, jobs=args.jobs, queues=QUEUES[:1])
            report("ruler", ruler)
        if args.before:
            with fleet(dsn, args.before, concurrency=args.concurrency, tag="before",
                       source=args.source):
                report("idle_before", idle(admin, name, args.before, settle=args.settle,
                                           window=args.window))
        for size in [int(s) for s in args.sizes.split(",") if s]:
            with fleet(dsn, size, concurrency=args.concurrency, tag=f"f{size}"):
                report("idle", idle(admin, name, size, settle=args.settle,
                                    window=args.window))
                if args.idle_only:
                    continue
                report("latency", {"workers": size, **latency(dsn, jobs=args.trickle,
                                                              gap=0.25)})
                for label, queues in (("one queue", QUEUES[:1]), ("four queues", QUEUES)):
                    found = drain(dsn, jobs=args.jobs, queues=queues)
                    report("drain", {"workers": size, "queues": label, **found,
                                     "ratio_to_ruler": round(found["jobs_per_s"]
                                                             / ruler["jobs_per_s"], 2)})
                report("in_flight", {"workers": size, **in_flight(
                    admin, name, dsn, claims=size * args.concurrency, window=20)})
        for point in [p for p in args.curve.split(",") if p]:
            processes, slots = (int(x) for x in point.split("x"))
            with fleet(dsn, processes, concurrency=slots, tag=f"c{point}"):
                found = drain(dsn, jobs=args.jobs, queues=QUEUES[:1])
                report("curve", {"processes": processes, "slots": slots, **found,
                                 "ratio_to_ruler": round(found["jobs_per_s"]
                                                         / ruler["jobs_per_s"], 2)})
        if args.bouncer:
            bouncer = _bouncer(dsn, args.bouncer_pool)
            try:
                for label, env in (("pgbouncer", {}), ("pgbouncer + direct LISTEN DSN",
                                                       {"JOBWARDEN_LISTEN_DSN": dsn})):
                    env = {"JOBWARDEN_DSN": bouncer.dsn, **env}
                    _clear(dsn)
                    with fleet(bouncer.dsn, args.bouncer, concurrency=args.concurrency,
                               tag="b", env=env):
                        found = idle(admin, name, args.bouncer, settle=args.settle,
                                     window=args.window)
                        found["server_connections"] = _connections(admin, name)
                        found["listen_connections"] = _connections(admin, name, "% listen")
                        report("bouncer", {"setup": label, **found, "latency": latency(
                            bouncer.dsn, jobs=args.trickle, gap=0.25)})
            finally:
                bouncer.close()
        results["finished_load"] = _load()
        if args.json_path:
            Path(args.json_path).write_text(json.dumps(results, indent=1) + "\n")
        return 0
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    raise SystemExit(main())
