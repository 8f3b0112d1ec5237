"""The worker's cost per job: ``python -m bench.drain``.

An in-process worker (out of the box but for ``--concurrency``) drains
``--jobs`` no-op jobs that one ``enqueue_many`` call stores while it waits,
idle and listening. Printed per job, for each run:

- the worker process's CPU (``time.process_time`` over every thread, from just
  before the jobs are stored until the last outcome is written): a figure the
  machine's load hardly moves, unlike the wall-clock rate printed beside it;
- each statement's server time (``pg_stat_statements``; with
  ``pg_stat_statements.track_planning = on`` split into planning and
  execution), with how many times it ran.

Each run is a fresh child process (``--child``), so runs share no warm caches.
The server needs ``shared_preload_libraries = pg_stat_statements`` for the
statement figures (without it only the CPU is printed). Diagnostic: the
throughput figures the issue is judged by come from ``python -m bench
--measure e2e``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

SCHEMA = "jobwarden"
DATABASE = "bench_drain"


def _child(dsn: str, concurrency: int, total: int) -> None:
    """The worker: ready, then CPU from "go" until every outcome is written."""
    import threading

    from bench.adapters import jobwarden_adapter
    from jobwarden import settings as jw_settings
    from jobwarden.assembly import build_worker
    from jobwarden.db.database import Database

    seen = 0
    done = threading.Event()

    def on_job(_i: int) -> None:
        nonlocal seen
        seen += 1  # slot threads: a lost increment only delays the end (the poll below)
        if seen >= total:
            done.set()

    jobwarden_adapter._on_job = on_job
    with Database(dsn, schema=SCHEMA) as db:
        worker = build_worker(db, jw_settings.WorkerSettings(http_port=None,
                                                             concurrency=concurrency))
        worker.start()
        worker.listening.wait(30)
        time.sleep(0.5)
        print("ready", flush=True)
        sys.stdin.readline()
        cpu = time.process_time()
        started = time.perf_counter()
        print("go", flush=True)
        done.wait(total * 0.1 + 120)
        idle = worker.recorder.idle(120)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        worker.stop()
    print(json.dumps({"cpu_s": cpu, "wall_s": elapsed, "bodies": seen,
                      "recorded": idle}), flush=True)


def _drain_dsn(dsn: str) -> str:
    import psycopg
    from psycopg import conninfo, sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (DATABASE,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    drain = conninfo.make_conninfo(dsn, dbname=DATABASE)
    with psycopg.connect(drain, autocommit=True) as conn:
        preloaded = conn.execute("SELECT 'pg_stat_statements' = ANY(string_to_array("
                                 "current_setting('shared_preload_libraries'), ', '))"
                                 ).fetchone()
        if preloaded and preloaded[0]:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return drain


def _statements(conn: Any) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT query, calls, total_plan_time, total_exec_time, plans"
        " FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " ORDER BY total_plan_time + total_exec_time DESC").fetchall()
    return [{"query": " ".join(q.split())[:160], "calls": calls, "plans": plans,
             "plan_ms": plan, "exec_ms": execute} for q, calls, plan, execute, plans in rows]


def run_once(dsn: str, *, concurrency: int, jobs: int) -> dict[str, Any]:
    import psycopg

    import jobwarden
    from bench.adapters import jobwarden_adapter

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE jobwarden.jobs CASCADE")  # SCHEMA
        has_statements = bool(conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'").fetchone())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    child = subprocess.Popen([sys.executable, "-m", "bench.drain", "--dsn", dsn, "--child",
                              "--concurrency", str(concurrency), "--jobs", str(jobs)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdin is not None and child.stdout is not None
    try:
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("the worker did not start")
        with psycopg.connect(dsn, autocommit=True) as conn:
            if has_statements:
                conn.execute("SELECT pg_stat_statements_reset()")
        child.stdin.write("go\n")
        child.stdin.flush()
        if child.stdout.readline().strip() != "go":
            raise SystemExit("the worker did not start measuring")
        with jobwarden.Client(dsn, schema=SCHEMA) as client:
            client.enqueue_many(jobwarden_adapter.noop, [{"i": i} for i in range(jobs)])
        result: dict[str, Any] = json.loads(child.stdout.readline())
    finally:
        child.wait(timeout=300)
    load = os.getloadavg()[0]
    statements: list[dict[str, Any]] = []
    if has_statements:
        with psycopg.connect(dsn, autocommit=True) as conn:
            statements = _statements(conn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE status = 'completed'), count(*)"
                           " FROM jobwarden.jobs").fetchone()  # SCHEMA
    assert row is not None
    return {"concurrency": concurrency, "jobs": jobs, "completed": row[0], "load": load,
            "cpu_ms_per_job": result["cpu_s"] * 1000 / jobs,
            "jobs_per_s_wall": jobs / result["wall_s"], "statements": statements}


def _print(run: dict[str, Any]) -> None:
    jobs = run["jobs"]
    print(f"concurrency {run['concurrency']}: {run['completed']}/{jobs} completed,"
          f" worker CPU {run['cpu_ms_per_job'] * 1000:.1f} us/job,"
          f" {run['jobs_per_s_wall']:.0f} jobs/s wall, load {run['load']:.1f}")
    print(f"  {'calls':>6} {'plan us/job':>11} {'exec us/job':>11}  statement")
    for s in run["statements"]:
        if s["plan_ms"] + s["exec_ms"] < 0.005 * jobs:
            continue
        print(f"  {s['calls']:>6} {s['plan_ms'] * 1000 / jobs:>11.2f}"
              f" {s['exec_ms'] * 1000 / jobs:>11.2f}  {s['query'][:90]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain")
    parser.add_argument("--dsn", required=True,
                        help="server to use (its database bench_drain is created)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,4",
                        help="comma-separated worker concurrencies, one run each")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every run's figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.dsn, int(args.concurrency), args.jobs)
        return 0

    from jobwarden.db.database import Database

    dsn = _drain_dsn(args.dsn)
    with Database(dsn, schema=SCHEMA) as db:
        db.migrate()
    runs = []
    for round_ in range(1, args.rounds + 1):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            run = run_once(dsn, concurrency=concurrency, jobs=args.jobs)
            run["round"] = round_
            _print(run)
            runs.append(run)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
