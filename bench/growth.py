"""``python -m bench.growth``: how Jobwarden's cost grows with the table and over time.

Issue 16, "How cost grows". Three curves, each figure printed with the load
average beside it (on a shared machine the figures are indicative):

* **table size**: one worker process (``jobwarden worker``, default
  concurrency) drains ``--drain`` (10,000) no-op jobs from a jobs table holding
  10k / 100k / 1M pending jobs, and from 10k pending beside 1M completed rows
  left behind. Throughput = drained jobs / (last finish - first claim) on the
  database clock. Claim latency = one ``db.jobs.claim(limit=1)`` timed from the
  client, 200 times, before the drain (the table as filled) and after it (the
  drained rows' dead tuples in front of the claim index, before autovacuum got
  to them, if it had not yet).
* **processes**: 1, 2, 4, 8 worker processes draining the small table.
* **soak** (``--soak SECONDS``): jobs enqueued at a steady ``--rate`` for that
  long, two worker processes, retention at ``--soak-retention`` (default
  ``completed=2m``, a pass every 10 s): every 15 s the workers' RSS, the jobs
  table's rows by status, its table and index size, dead tuples, autovacuum
  runs, and the load.

Filling is SQL (``INSERT ... SELECT generate_series``) followed by ``VACUUM
ANALYZE`` -- the state autovacuum leaves a bulk-loaded table in -- so a million
rows take seconds, not minutes; completed rows "finished" an hour ago. Every
scenario uses a fresh database (``<prefix>growth``) on ``--dsn``; run it on a
private server with fsync and autovacuum on (docs/benchmarks.md, "How cost
grows"). Workers run with ``JOBWARDEN_RETENTION_INTERVAL=0`` except in the
soak. Results: ``bench/results/growth-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

import jobwarden
from bench import databases
from jobwarden.db.database import Database

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
JOB_CLASS = "bench.growth:noop"


@jobwarden.job(max_retries=0)
def noop(i: int = 0) -> None:
    """The measured job: does nothing, so the figures are the queue's own cost."""


def load() -> float:
    return os.getloadavg()[0]


def _sql(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def fill(dsn: str, *, pending: int, completed: int = 0) -> None:
    """Bulk-load the table, then VACUUM ANALYZE as autovacuum would leave it."""
    if completed:
        _sql(dsn, "INSERT INTO jobwarden.jobs (job_class, data, status, attempts, claimed_at,"
                  " finished_at, result) SELECT %s, jsonb_build_object('i', g), 'completed', 1,"
                  " now() - interval '1 hour', now() - interval '1 hour', 'null'"
                  " FROM generate_series(1, %s) AS g", (JOB_CLASS, completed))
    if pending:
        _sql(dsn, "INSERT INTO jobwarden.jobs (job_class, data) SELECT %s,"
                  " jsonb_build_object('i', g) FROM generate_series(1, %s) AS g",
             (JOB_CLASS, pending))
    _sql(dsn, "VACUUM ANALYZE jobwarden.jobs")


def sizes(dsn: str) -> dict[str, Any]:
    row = _sql(dsn, "SELECT pg_table_size('jobwarden.jobs'), pg_indexes_size('jobwarden.jobs'),"
                    " coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0),"
                    " coalesce(autovacuum_count, 0), coalesce(autoanalyze_count, 0)"
                    " FROM pg_stat_user_tables WHERE relid = 'jobwarden.jobs'::regclass")[0]
    indexes = dict(_sql(dsn, "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)"
                             " FROM pg_index WHERE indrelid = 'jobwarden.jobs'::regclass"))
    return {"table_bytes": row[0], "index_bytes": row[1], "live": row[2], "dead": row[3],
            "autovacuums": row[4], "autoanalyzes": row[5], "indexes": indexes}


def claim_latency(dsn: str, *, samples: int = 200) -> dict[str, float]:
    """One single-job claim, timed from the client (ms): the index path a worker takes."""
    timings: list[float] = []
    with Database(dsn, min_size=1, max_size=1) as db:
        db.check()
        for _ in range(samples):
            started = time.perf_counter()
            db.jobs.claim(host="bench-probe", limit=1, grace_seconds=600)
            timings.append((time.perf_counter() - started) * 1000)
        # Give the probes back, so they neither count nor block a drain.
        _sql(dsn, "UPDATE jobwarden.jobs SET status = 'pending', claim_token = NULL,"
                  " claimed_by = NULL, claim_expires_at = NULL, attempts = 0"
                  " WHERE claimed_by = 'bench-probe' AND status = 'processing'")
    timings.sort()
    return {"p50_ms": statistics.median(timings),
            "p99_ms": timings[min(len(timings) - 1, int(len(timings) * 0.99))]}


@contextmanager
def workers(dsn: str, count: int, *, env: dict[str, str] | None = None,
            concurrency: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` real ``jobwarden worker`` processes on the bench module's job."""
    environment = {**os.environ, "JOBWARDEN_DSN": dsn, "JOBWARDEN_RETENTION_INTERVAL": "0",
                   **(env or {})}
    extra = ["--concurrency", str(concurrency)] if concurrency else []
    procs = [subprocess.Popen(
        [sys.executable, "-m", "jobwarden", "worker", "--app", "bench.growth",
         "--host", f"growth-{i}", *extra],
        cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def drain(dsn: str, *, processes: int, jobs: int, timeout: float = 600) -> dict[str, float]:
    """Start the workers, wait for ``jobs`` finished, throughput on the database clock."""
    started_at = _sql(dsn, "SELECT now()")[0][0]
    with workers(dsn, processes) as procs:
        deadline = time.monotonic() + timeout
        while True:
            done = _sql(dsn, "SELECT count(*) FROM jobwarden.jobs WHERE finished_at >= %s",
                        (started_at,))[0][0]
            if done >= jobs:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"only {done} of {jobs} jobs finished")
            time.sleep(0.2)
    count, seconds = _sql(dsn, "WITH f AS (SELECT claimed_at, finished_at FROM jobwarden.jobs"
                               " WHERE finished_at >= %s ORDER BY finished_at LIMIT %s)"
                               " SELECT count(*), extract(epoch FROM max(finished_at)"
                               " - min(claimed_at))::float8 FROM f", (started_at, jobs))[0]
    return {"jobs": count, "seconds": seconds, "jobs_per_s": count / seconds}


def scenario(dsn: str, name: str, *, pending: int, completed: int, processes: int,
             drain_jobs: int, dbname: str = "bench_growth") -> dict[str, Any]:
    with databases.fresh_database(dsn, dbname) as db_dsn:
        with jobwarden.Client(db_dsn) as client:
            client.db.migrate()
        fill(db_dsn, pending=pending, completed=completed)
        record: dict[str, Any] = {"scenario": name, "pending": pending, "completed": completed,
                                  "processes": processes, "filled": sizes(db_dsn)}
        record["load_before"] = load()
        record["claim_before"] = claim_latency(db_dsn)
        record["drain"] = drain(db_dsn, processes=processes, jobs=drain_jobs)
        record["claim_after"] = claim_latency(db_dsn)
        record["load_after"] = load()
        record["drained"] = sizes(db_dsn)
    print(f"  {name:<34} {record['drain']['jobs_per_s']:8,.0f} jobs/s   claim p50 "
          f"{record['claim_before']['p50_ms']:5.2f} / after drain "
          f"{record['claim_after']['p50_ms']:5.2f} ms   p99 "
          f"{record['claim_before']['p99_ms']:6.2f} / {record['claim_after']['p99_ms']:6.2f} ms"
          f"   load {record['load_before']:.1f}-{record['load_after']:.1f}", flush=True)
    return record


def soak(dsn: str, *, seconds: float, rate: int, retention: str, every: float = 15.0,
         dbname: str = "bench_growth_soak") -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    with databases.fresh_database(dsn, dbname) as db_dsn, \
            jobwarden.Client(db_dsn) as client:
        client.db.migrate()
        stop = threading.Event()
        enqueued = [0]

        def enqueuer() -> None:
            tick = 0.1
            per_tick = max(1, int(rate * tick))
            next_at = time.monotonic()
            while not stop.is_set():
                client.enqueue_many(JOB_CLASS, [{"i": 0}] * per_tick)
                enqueued[0] += per_tick
                next_at += tick
                stop.wait(max(0.0, next_at - time.monotonic()))

        env = {"JOBWARDEN_RETENTION": retention, "JOBWARDEN_RETENTION_INTERVAL": "10"}
        with workers(db_dsn, 2, env=env) as procs:
            thread = threading.Thread(target=enqueuer, daemon=True)
            started = time.monotonic()
            thread.start()
            try:
                while time.monotonic() - started < seconds:
                    time.sleep(every)
                    by_status = dict(_sql(db_dsn, "SELECT status::text, count(*)"
                                                  " FROM jobwarden.jobs GROUP BY 1"))
                    rss = sum(_rss_kib(p.pid) for p in procs)
                    sample = {"t": round(time.monotonic() - started), "load": load(),
                              "enqueued": enqueued[0], "rows": by_status,
                              "workers_rss_mib": rss / 1024, **sizes(db_dsn)}
                    sample.pop("indexes")
                    samples.append(sample)
                    print(f"  t={sample['t']:4d}s load {sample['load']:5.1f}  enqueued "
                          f"{sample['enqueued']:7,}  rows {by_status}  table "
                          f"{sample['table_bytes'] / 2**20:6.1f} MiB  indexes "
                          f"{sample['index_bytes'] / 2**20:6.1f} MiB  dead "
                          f"{sample['dead']:7,}  autovacuums {sample['autovacuums']}  RSS "
                          f"{sample['workers_rss_mib']:5.1f} MiB (2 workers)", flush=True)
            finally:
                stop.set()
                thread.join(10)
    return {"seconds": seconds, "rate": rate, "retention": retention, "samples": samples}


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.growth",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dsn", default=os.environ.get("JOBWARDEN_BENCH_DSN", DEFAULT_DSN))
    p.add_argument("--drain", type=int, default=10_000, help="jobs drained per figure")
    p.add_argument("--sizes", default="10000,100000,1000000",
                   help="pending rows of the table-size curve")
    p.add_argument("--completed", type=int, default=1_000_000,
                   help="completed rows left behind in the last table-size figure (0: skip)")
    p.add_argument("--processes", default="1,2,4,8", help="worker processes of that curve")
    p.add_argument("--reps", type=int, default=2, help="repetitions (interleaved; medians)")
    p.add_argument("--soak", type=float, default=0.0, help="soak seconds (0: no soak)")
    p.add_argument("--rate", type=int, default=200, help="soak: jobs enqueued per second")
    p.add_argument("--soak-retention", default="completed=2m")
    p.add_argument("--only", choices=["sizes", "processes", "soak"], action="append")
    p.add_argument("--db-name", default="bench_growth",
                   help="the scratch database (created and dropped; the soak's gets _soak)")
    p.add_argument("--soak-every", type=float, default=15.0, help="soak: seconds per sample")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON record (default bench/results/growth-<date>.json)")
    args = p.parse_args(argv)
    only = set(args.only or ["sizes", "processes", "soak"])
    facts = databases.server_facts(args.dsn)
    print(f"server: {facts}")
    record: dict[str, Any] = {"server": facts, "started": datetime.datetime.now(
        datetime.UTC).isoformat(), "runs": []}
    small = int(args.sizes.split(",")[0])
    plans: list[dict[str, Any]] = []
    if "sizes" in only:
        plans += [dict(name=f"{int(n):,} pending", pending=int(n), completed=0, processes=1)
                  for n in args.sizes.split(",")]
        if args.completed:
            plans.append(dict(name=f"{small:,} pending + {args.completed:,} completed",
                              pending=small, completed=args.completed, processes=1))
    if "processes" in only:
        plans += [dict(name=f"{small:,} pending, {n} processes", pending=small, completed=0,
                       processes=int(n)) for n in args.processes.split(",") if int(n) != 1
                  or "sizes" not in only]
    for rep in range(args.reps):
        print(f"repetition {rep + 1} of {args.reps}", flush=True)
        for plan in plans:
            record["runs"].append({"rep": rep, **scenario(
                args.dsn, plan["name"], pending=plan["pending"], completed=plan["completed"],
                processes=plan["processes"], drain_jobs=min(args.drain, plan["pending"]),
                dbname=args.db_name)})
    if record["runs"]:
        print("medians:")
        for plan in plans:
            runs = [r for r in record["runs"] if r["scenario"] == plan["name"]]
            rate = statistics.median(r["drain"]["jobs_per_s"] for r in runs)
            before = statistics.median(r["claim_before"]["p50_ms"] for r in runs)
            after = statistics.median(r["claim_after"]["p50_ms"] for r in runs)
            loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
            print(f"  {plan['name']:<34} {rate:8,.0f} jobs/s  claim p50 {before:5.2f} ms "
                  f"(after drain {after:5.2f})  load {min(loads):.1f}-{max(loads):.1f}")
    if "soak" in only and args.soak > 0:
        print(f"soak: {args.soak:g} s at {args.rate} jobs/s, retention {args.soak_retention}",
              flush=True)
        record["soak"] = soak(args.dsn, seconds=args.soak, rate=args.rate,
                              retention=args.soak_retention, every=args.soak_every,
                              dbname=f"{args.db_name}_soak")
    out = args.out or RESULTS / f"growth-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
