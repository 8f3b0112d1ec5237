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

``--profile`` adds, to each drain and trickle, what it cost per job (the
database's transactions, statements by kind, CPU seconds of the server's and of
the fleet's processes; see :class:`Profile`), and to each idle window the same
per second per worker: does the work per job grow with the fleet (issue 31)?
``--before-drains`` runs each size's trickle and drains again on ``--source``'s
code, against the same ruler. ``--trickle-only`` runs only the trickle (claims
per single enqueue into an idle fleet: the wake-up herd, issue 31).

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


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds of a live process (its threads included); with ``reaped`` also
    those of its children it waited for (a postmaster's exited backends)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return found


def _postmaster(dsn: str) -> int | None:
    """The server's postmaster, when it runs on this machine (its backends' parent)."""
    backend = int(_one(dsn, "SELECT pg_backend_pid()"))
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


class Profile:
    """What one step cost, per job: the server's transactions and statements
    (``pg_stat_database``, ``pg_stat_statements``), and CPU seconds of the server's
    processes (the postmaster, its live backends and those that exited) and of
    the fleet's (issue 31: does the work per job grow with the fleet?)."""

    #: Statements by what they are (first matching pattern of the normalised text).
    KINDS = (("claim", "picked AS"), ("host lock", "FOR SHARE"), ("complete", "done AS"),
             ("next due", "min(run_at) - now()"), ("heartbeat", "heartbeat_at = now()"),
             ("reaper", "WITH stale AS"), ("notify", "pg_notify"))

    def __init__(self, admin: str, name: str, dsn: str, pids: Sequence[int]) -> None:
        self.admin, self.name, self.dsn, self.pids = admin, name, dsn, list(pids)
        self.postmaster = _postmaster(dsn)

    def server_cpu(self) -> float:
        if self.postmaster is None:
            return 0.0
        return _cpu_of(self.postmaster, reaped=True) + sum(
            _cpu_of(pid) for pid in _children(self.postmaster))

    def fleet_cpu(self) -> float:
        return sum(_cpu_of(pid) for pid in self.pids)

    def start(self) -> None:
        with contextlib.suppress(psycopg.Error):
            _one(self.dsn, "SELECT pg_stat_statements_reset()")
        self.xacts, self.server, self.fleet = (_xacts(self.admin, self.name),
                                               self.server_cpu(), self.fleet_cpu())
        self.started = time.monotonic()

    def stop(self, jobs: int) -> dict[str, Any]:
        seconds = time.monotonic() - self.started
        found: dict[str, Any] = {
            "xacts_per_job": round((_xacts(self.admin, self.name) - self.xacts) / jobs, 2),
            "server_cpu_ms_per_job": round(1000 * (self.server_cpu() - self.server) / jobs, 3),
            "fleet_cpu_ms_per_job": round(1000 * (self.fleet_cpu() - self.fleet) / jobs, 3),
            "profiled_seconds": round(seconds, 1)}
        found.update(self.statements(jobs))
        return found

    def statements(self, per: float) -> dict[str, Any]:
        """Statement calls (and their server ms) by kind since :meth:`start`, per ``per``."""
        found: dict[str, Any] = {}
        jobs = per
        calls: dict[str, list[float]] = {}
        others: dict[str, int] = {}
        with contextlib.suppress(psycopg.Error), \
                psycopg.connect(self.dsn, autocommit=True) as conn:
            for query, n, rows, ms in conn.execute(
                    "SELECT query, calls, rows, total_exec_time FROM pg_stat_statements "
                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
                    "current_database()) AND query NOT LIKE '%%pg_stat_%%'"):
                kind = next((k for k, pattern in self.KINDS if pattern in query), "other")
                if kind == "other":
                    others[" ".join(query.split())[:60]] = others.get(
                        " ".join(query.split())[:60], 0) + n
                sums = calls.setdefault(kind, [0, 0, 0.0])
                sums[0] += n
                sums[1] += rows
                sums[2] += ms
        found["statements"] = {k: round(v[0] / jobs, 3) for k, v in sorted(calls.items())}
        found["statement_ms"] = {k: round(v[2] / jobs, 3) for k, v in sorted(calls.items())}
        found["other_statements"] = {
            k: round(n / jobs, 3) for k, n in sorted(others.items(), key=lambda i: -i[1])[:6]}
        if calls.get("claim", [0])[0]:
            found["jobs_per_claim"] = round(calls["claim"][1] / calls["claim"][0], 2)
        return found


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
         like: str = "%", profile: Profile | None = None) -> dict[str, Any]:
    """Transactions/s and server connections per worker of an idle fleet (with a
    profile: also CPU of the server and of the fleet, per worker)."""
    time.sleep(settle)  # past start-up: registration, the pool's first connections
    if profile:
        profile.start()
    cpu = (profile.server_cpu(), profile.fleet_cpu()) if profile else (0.0, 0.0)
    before, started = _xacts(admin, name), time.monotonic()
    samples = []
    while time.monotonic() - started < window:
        time.sleep(min(5.0, window / 6))
        samples.append(_connections(admin, name, like))
    spent = time.monotonic() - started
    return {"workers": size, "xact_per_s_per_worker":
            round((_xacts(admin, name) - before) / spent / size, 3),
            "connections_per_worker": round(statistics.mean(samples) / size, 2),
            "load": _load(), **({
                "server_cpu_ms_per_s_per_worker":
                    round(1000 * (profile.server_cpu() - cpu[0]) / spent / size, 3),
                "fleet_cpu_ms_per_s_per_worker":
                    round(1000 * (profile.fleet_cpu() - cpu[1]) / spent / size, 3),
                "per_s_per_worker": profile.statements(spent * size)}
                if profile else {})}


def _clear(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM jobwarden.jobs")


def latency(dsn: str, *, jobs: int, gap: float,
            profile: Profile | None = None) -> dict[str, Any]:
    """Enqueue to claim (database clock) of single enqueues into an idle fleet."""
    import jobwarden

    _clear(dsn)
    if profile:
        profile.start()
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
            "load": _load(), **({"profile": profile.stop(jobs)} if profile else {})}


def _wait_done(dsn: str, total: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while _one(dsn, "SELECT count(*) FROM jobwarden.jobs WHERE status = 'completed'") < total:
        if time.monotonic() > deadline:
            raise RuntimeError("the jobs did not finish")
        time.sleep(0.2)


def drain(dsn: str, *, jobs: int, queues: Sequence[str],
          profile: Profile | None = None) -> dict[str, Any]:
    """Store ``jobs`` no-ops in one statement (spread over ``queues``); jobs/s until
    the last finished, on the database clock."""
    import jobwarden

    _clear(dsn)
    if profile:
        profile.start()
    with jobwarden.Client(dsn) as client:
        per = jobs // len(queues)
        for queue in queues:
            client.enqueue_many(NOOP, [None] * per, queue=queue)
    _wait_done(dsn, per * len(queues))
    seconds = float(_one(dsn, "SELECT extract(epoch FROM max(finished_at) - min(created_at)) "
                              "FROM jobwarden.jobs"))
    return {"jobs": per * len(queues), "jobs_per_s": round(per * len(queues) / seconds, 1),
            "load": _load(),
            **({"profile": profile.stop(per * len(queues))} if profile else {})}


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
    parser.add_argument("--drains-only", action="store_true",
                        help="per fleet size only the latency trickle and the drains")
    parser.add_argument("--trickle-only", action="store_true",
                        help="per fleet size only the latency trickle, --settle seconds "
                             "after start (with --before-drains: on --source's code too)")
    parser.add_argument("--before-drains", action="store_true",
                        help="after each fleet size, the same size running --source: "
                             "its trickle and drains, against the same ruler")
    parser.add_argument("--profile", action="store_true",
                        help="with each drain and trickle: transactions, statements and "
                             "server / fleet CPU per job (see Profile)")
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
        def profiled(running: Fleet) -> Profile | None:
            return Profile(admin, name, dsn, [p.pid for p in running.procs]) \
                if args.profile else None

        with fleet(dsn, 1, concurrency=args.concurrency, tag="ruler") as one:
            ruler = drain(dsn, jobs=args.jobs, queues=QUEUES[:1], profile=profiled(one))
            report("ruler", ruler)
        if args.before:
            with fleet(dsn, args.before, concurrency=args.concurrency, tag="before",
                       source=args.source):
                report("idle_before", idle(admin, name, args.before, settle=args.settle,
                                           window=args.window))
        for size in [int(s) for s in args.sizes.split(",") if s]:
            with fleet(dsn, size, concurrency=args.concurrency, tag=f"f{size}") as running:
                if args.trickle_only:
                    time.sleep(args.settle)  # idle, LISTEN verified: marked for wake-ups
                elif not args.drains_only:
                    report("idle", idle(admin, name, size, settle=args.settle,
                                        window=args.window, profile=profiled(running)))
                if args.idle_only:
                    continue
                report("latency", {"workers": size, **latency(
                    dsn, jobs=args.trickle, gap=0.25, profile=profiled(running))})
                for label, queues in (() if args.trickle_only else
                                      (("one queue", QUEUES[:1]), ("four queues", QUEUES))):
                    found = drain(dsn, jobs=args.jobs, queues=queues,
                                  profile=profiled(running))
                    report("drain", {"workers": size, "queues": label, **found,
                                     "ratio_to_ruler": round(found["jobs_per_s"]
                                                             / ruler["jobs_per_s"], 2)})
                if not (args.drains_only or args.trickle_only):
                    report("in_flight", {"workers": size, **in_flight(
                        admin, name, dsn, claims=size * args.concurrency, window=20)})
            if args.source and args.before_drains:
                with fleet(dsn, size, concurrency=args.concurrency, tag=f"b{size}",
                           source=args.source) as running:
                    if args.trickle_only:
                        time.sleep(args.settle)
                    report("latency_before", {"workers": size, **latency(
                        dsn, jobs=args.trickle, gap=0.25, profile=profiled(running))})
                    for label, queues in (() if args.trickle_only else
                                          (("one queue", QUEUES[:1]), ("four queues", QUEUES))):
                        found = drain(dsn, jobs=args.jobs, queues=queues,
                                      profile=profiled(running))
                        report("drain_before", {
                            "workers": size, "queues": label, **found,
                            "ratio_to_ruler": round(found["jobs_per_s"]
                                                    / ruler["jobs_per_s"], 2)})
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
                               tag="b", env=env) as running:
                        found = idle(admin, name, args.bouncer, settle=args.settle,
                                     window=args.window, profile=Profile(
                                         admin, name, dsn, [p.pid for p in running.procs])
                                     if args.profile else None)
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
