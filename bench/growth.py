"""``python -m bench.growth``: how cost grows with the table, side by side with the peers.

Issue 16, "How cost grows". Each figure is taken for every system in the same
run (Jobwarden, procrastinate, pgqueuer through ``bench/adapters``: the same
no-op job, the same server, a fresh database of its own per system and point),
repetitions interleaved (repetition 1 of every point of every system, then
repetition 2; the systems' order rotates per repetition), medians printed with
Jobwarden's ratio to each peer and each system's change against its own
small-table figure, and the 1-minute load average recorded beside every point.

* **table size**: one worker process (each system's out-of-the-box best
  setting, as the ``best`` row of ``python -m bench``) drains ``--drain``
  (10,000) jobs, or what it starts in ``--drain-seconds`` (15) if fewer,
  from a queue holding 10k / 100k / 1M pending jobs, and from 10k pending
  beside 1M completed jobs left behind. Claim latency: one single-job claim
  through the call or statement the system's worker claims with, timed from
  the client ``--samples`` (200) times on the table as filled (the claimed
  jobs are given back before the drain).
* **processes**: 1, 2, 4, 8 worker processes draining the small table together.
  Throughput = (jobs - 1) / (start of the last counted job - start of the first),
  on the monotonic clock every process shares, counting the first ``--drain``
  job starts across the processes (all of them when the time bound stopped it;
  ``bench.child --mode shared``: the processes import their library first and
  start their workers together on a signal).
* **soak** (``--soak SECONDS``, Jobwarden only): jobs enqueued at a steady
  ``--rate`` for that long, two ``jobwarden worker`` processes, retention at
  ``--soak-retention`` (default ``completed=2m``, a pass every 10 s): every 15 s
  the workers' RSS, the jobs table's rows by status, its table and index size,
  dead tuples, autovacuum runs, and the load.

Filling is SQL in each system's own tables (``INSERT ... SELECT
generate_series``: every row, in every table, that the system's API and worker
would leave -- each adapter's ``fill`` says which), then ``VACUUM ANALYZE`` of
the database -- the state autovacuum leaves a bulk load in -- and a
``CHECKPOINT`` (so the load's writes do not land in the drain), so a million rows
take seconds, not the minutes an enqueue API would. Completed jobs "finished"
an hour ago. Run it on a private server with fsync and autovacuum on
(docs/benchmarks.md, "How cost grows"). ``--quick``: tiny sizes, one
repetition, a smoke test (``tests/bench``), not a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

import jobwarden
from bench import adapters, databases, measure
from bench.adapters import base

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
ALL_SYSTEMS = ("jobwarden", "procrastinate", "pgqueuer")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
JOB_CLASS = "bench.growth:noop"
# A regression of more than this against the small-table figure is a defect (issue 16).
DEGRADATION_LIMIT = 0.20


@jobwarden.job(max_retries=0)
def noop(i: int = 0) -> None:
    """The soak's job: does nothing, so the figures are the queue's own cost."""


def load() -> float:
    return os.getloadavg()[0]


def _sql(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def database_sizes(dsn: str) -> dict[str, Any]:
    """Every user table of the database: rows, bytes, dead tuples (the system's whole footprint)."""
    rows = _sql(dsn, "SELECT relname::text, n_live_tup, n_dead_tup, pg_table_size(relid),"
                     " pg_indexes_size(relid) FROM pg_stat_user_tables ORDER BY 1")
    tables = {name: {"live": live, "dead": dead, "table_bytes": tb, "index_bytes": ib}
              for name, live, dead, tb, ib in rows if tb > 8192 or live}
    return {"table_bytes": sum(t["table_bytes"] for t in tables.values()),
            "index_bytes": sum(t["index_bytes"] for t in tables.values()),
            "dead": sum(t["dead"] for t in tables.values()), "tables": tables}


def sizes(dsn: str) -> dict[str, Any]:
    """The soak's jobs table: bytes, live and dead tuples, autovacuum runs."""
    row = _sql(dsn, "SELECT pg_table_size('jobwarden.jobs'), pg_indexes_size('jobwarden.jobs'),"
                    " coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0),"
                    " coalesce(autovacuum_count, 0), coalesce(autoanalyze_count, 0)"
                    " FROM pg_stat_user_tables WHERE relid = 'jobwarden.jobs'::regclass")[0]
    return {"table_bytes": row[0], "index_bytes": row[1], "live": row[2], "dead": row[3],
            "autovacuums": row[4], "autoanalyzes": row[5]}


def _statements_reset(dsn: str) -> bool:
    """Zero pg_stat_statements if the server loads it (``shared_preload_libraries``)."""
    try:
        _sql(dsn, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        _sql(dsn, "SELECT pg_stat_statements_reset()")
    except psycopg.Error:
        return False
    return True


def server_time(dsn: str, *, jobs: int) -> dict[str, Any]:
    """The server's own execution time during the drain, per job (pg_stat_statements).

    A figure the machine's load moves far less than a wall-clock rate: the time
    the server spent executing the system's statements, divided by the jobs
    that ran; the top statements say where it went. The comparable figure is
    ``exec_ms_per_job_without_commit``: an explicit ``COMMIT`` statement's time
    (its WAL flush) is counted by pg_stat_statements, an autocommit statement's
    implicit commit is not, and the systems differ in which they use.
    """
    rows = _sql(dsn, "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 120), calls,"
                     " total_exec_time, shared_blks_hit + shared_blks_read"
                     " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
                     " WHERE datname = current_database()) AND query NOT LIKE"
                     " '%%pg_stat_statements%%' ORDER BY total_exec_time DESC")
    total = sum(r[2] for r in rows)
    commits = sum(r[2] for r in rows if r[0].strip().upper() in ("COMMIT", "END"))
    blocks = sum(r[3] for r in rows)
    return {"jobs": jobs, "exec_ms_per_job": total / jobs if jobs else 0.0,
            "exec_ms_per_job_without_commit": (total - commits) / jobs if jobs else 0.0,
            "buffers_per_job": blocks / jobs if jobs else 0.0,
            "top": [{"query": q, "calls": c, "total_ms": t, "buffers": b}
                    for q, c, t, b in rows[:5]]}


def percentiles(timings: list[float]) -> dict[str, float]:
    return {"p50_ms": measure.percentile(timings, 50), "p99_ms": measure.percentile(timings, 99)}


class _Proc:
    """One ``bench.child --mode shared`` process: its last progress and its result."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ready = asyncio.Event()
        self.count = 0
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.stderr = bytearray()
        assert proc.stdout is not None and proc.stderr is not None
        self._tasks = [asyncio.create_task(self._read(proc.stdout)),
                       asyncio.create_task(self._keep_stderr(proc.stderr))]

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            if not line.startswith(b"BENCH "):
                continue
            message: dict[str, Any] = json.loads(line[6:])
            if message["event"] == "ready":
                self.ready.set()
            elif message["event"] == "progress":
                self.count = int(message["count"])
            elif message["event"] == "result":
                self.result = message
            elif message["event"] == "error":
                self.error = str(message["error"])

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.stderr += chunk
            del self.stderr[:-4096]

    def failure(self) -> str | None:
        if self.error is not None or (self.proc.returncode not in (None, 0)):
            tail = bytes(self.stderr[-1500:]).decode(errors="replace").strip()
            return f"worker failed ({self.proc.returncode}): {self.error}\n{tail}"
        return None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write(command.encode() + b"\n")

    async def finish(self, timeout: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await asyncio.gather(*self._tasks)


@contextlib.asynccontextmanager
async def shared_workers(system: str, dsn: str, count: int,
                         timeout: float) -> AsyncIterator[list[_Proc]]:
    measure.compile_bytecode(system)  # imported as installed (the soak reports RSS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    procs: list[_Proc] = []
    try:
        for _ in range(count):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.child", "--system", system, "--dsn", dsn,
                "--mode", "shared", "--label", "best", "--timeout", str(timeout),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, limit=2**26)
            procs.append(_Proc(proc))
        yield procs
    finally:
        for proc in procs:
            await proc.finish(timeout)


async def drain(system: str, dsn: str, *, processes: int, jobs: int, seconds: float,
                timeout: float) -> dict[str, Any]:
    """``processes`` workers of ``system`` drain ``jobs`` of the queue together, or
    what they start in ``seconds`` from the signal if that is fewer (a slow system
    would otherwise take minutes per point; its rate is measured all the same)."""
    async with shared_workers(system, dsn, processes, timeout) as procs:
        deadline = time.monotonic() + timeout
        for proc in procs:
            while not proc.ready.is_set():
                if (failure := proc.failure()) or proc.proc.returncode is not None:
                    raise RuntimeError(failure or "worker exited before it was ready")
                if time.monotonic() > deadline:
                    raise TimeoutError("a worker was not ready in time")
                await asyncio.sleep(0.02)
        for proc in procs:
            proc.send("go")
        window = time.monotonic() + seconds
        while sum(p.count for p in procs) < jobs and time.monotonic() < window:
            for proc in procs:
                if (failure := proc.failure()) or proc.proc.returncode is not None:
                    raise RuntimeError(failure or "a worker exited during the drain")
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {sum(p.count for p in procs)} of {jobs} jobs"
                                   f" started in {timeout:.0f}s")
            await asyncio.sleep(0.02)
        for proc in procs:
            proc.send("stop")
    failures = [f for p in procs if (f := p.failure())]
    if failures or any(p.result is None for p in procs):
        raise RuntimeError("; ".join(failures) or "a worker reported no result")
    starts = sorted(t for p in procs for t in (p.result or {})["starts"])
    counted = starts[:jobs]
    if len(counted) < 2:
        raise RuntimeError(f"only {len(counted)} jobs started in {seconds:g}s")
    span = counted[-1] - counted[0]
    return {"jobs": len(counted), "seconds": span, "time_bound": len(counted) < jobs,
            "jobs_per_s": (len(counted) - 1) / span if span > 0 else 0.0,
            "started_in_all": len(starts),
            "per_process": [int((p.result or {})["count"]) for p in procs]}


async def point(system: base.System, server_dsn: str, dbname: str, *, pending: int,
                completed: int, processes: int, drain_jobs: int, drain_seconds: float,
                samples: int, timeout: float) -> dict[str, Any]:
    """One figure of one system: fresh database, fill, vacuum, probe, drain."""
    with databases.fresh_database(server_dsn, dbname) as dsn:
        await system.install(dsn)
        filling = time.perf_counter()
        await system.fill(dsn, pending=pending, completed=completed)
        _sql(dsn, "VACUUM ANALYZE")
        # The load's dirty pages are written now, not by a checkpoint during the
        # drain (a million rows are ~1 GB of WAL: max_wal_size's default).
        _sql(dsn, "CHECKPOINT")
        record: dict[str, Any] = {"fill_seconds": time.perf_counter() - filling,
                                  "filled": database_sizes(dsn), "load_before": load()}
        record["claim"] = percentiles(await system.claim_latencies(dsn, samples=samples))
        statements = _statements_reset(dsn)
        record["drain"] = await drain(system.name, dsn, processes=processes, jobs=drain_jobs,
                                      seconds=drain_seconds, timeout=timeout)
        if statements:
            record["server"] = server_time(dsn, jobs=record["drain"]["started_in_all"])
        record["load_after"] = load()
    return record


def _plans(args: argparse.Namespace) -> list[dict[str, Any]]:
    only = set(args.only or ["sizes", "processes", "soak"])
    sizes = [int(n) for n in args.sizes.split(",")]
    small = sizes[0]
    plans: list[dict[str, Any]] = []
    if "sizes" in only:
        plans += [{"name": f"{n:,} pending", "curve": "sizes", "pending": n, "completed": 0,
                   "processes": 1} for n in sizes]
        if args.completed:
            plans.append({"name": f"{small:,} pending + {args.completed:,} completed",
                          "curve": "sizes", "pending": small, "completed": args.completed,
                          "processes": 1})
    if "processes" in only:
        # One process on the small table is the table-size curve's first point.
        plans += [{"name": f"{small:,} pending, {n} processes", "curve": "processes",
                   "pending": small, "completed": 0, "processes": n}
                  for n in (int(x) for x in args.processes.split(","))
                  if n != 1 or "sizes" not in only]
    return plans


def summarize(plans: list[dict[str, Any]], runs: list[dict[str, Any]],
              systems: list[str]) -> dict[str, Any]:
    """Medians per point and system, ratios to each peer, change against the small table."""
    summary: dict[str, Any] = {}
    for plan in plans:
        row: dict[str, Any] = {}
        for name in systems:
            mine = [r for r in runs if r["scenario"] == plan["name"] and r["system"] == name
                    and "drain" in r]
            if not mine:
                continue
            loads = [r["load_before"] for r in mine] + [r["load_after"] for r in mine]
            row[name] = {
                "jobs_per_s": statistics.median(r["drain"]["jobs_per_s"] for r in mine),
                "claim_p50_ms": statistics.median(r["claim"]["p50_ms"] for r in mine),
                "claim_p99_ms": statistics.median(r["claim"]["p99_ms"] for r in mine),
                "runs": [round(r["drain"]["jobs_per_s"]) for r in mine],
                **({"server_ms_per_job": statistics.median(
                        r["server"]["exec_ms_per_job_without_commit"] for r in mine),
                    "server_buffers_per_job": statistics.median(
                        r["server"]["buffers_per_job"] for r in mine)}
                   if all("server" in r for r in mine) else {}),
                "load": [min(loads), max(loads)],
            }
        summary[plan["name"]] = row
    base_name = plans[0]["name"] if plans else None
    for plan in plans:
        row = summary[plan["name"]]
        for name, figures in row.items():
            small = summary.get(base_name or "", {}).get(name)
            if small and small["jobs_per_s"]:
                figures["vs_small_table"] = figures["jobs_per_s"] / small["jobs_per_s"] - 1
                figures["claim_vs_small_table"] = (figures["claim_p50_ms"]
                                                   / small["claim_p50_ms"] - 1)
        jw = row.get("jobwarden")
        if jw:
            jw["ratios"] = {peer: {"jobs_per_s": jw["jobs_per_s"] / f["jobs_per_s"],
                                   "claim_p50": jw["claim_p50_ms"] / f["claim_p50_ms"]}
                            for peer, f in row.items() if peer != "jobwarden"
                            and f["jobs_per_s"] and f["claim_p50_ms"]}
    return summary


def _row(name: str, row: dict[str, Any], systems: list[str], cell: Any, ratio_key: str) -> str:
    """One point's line: each system's cell (``-`` when it has no figure), then
    Jobwarden's ratio to each peer under ``ratio_key``."""
    text = f"  {name:<38}"
    for system in systems:
        f = row.get(system)
        text += f"{'-':>24}" if f is None else cell(f)
    jw = row.get("jobwarden", {})
    for peer in (s for s in systems if s != "jobwarden"):
        ratio = jw.get("ratios", {}).get(peer)
        text += f"{ratio[ratio_key]:>9.2f}x" if ratio else f"{'-':>10}"
    return text


def _throughput(f: dict[str, Any]) -> str:
    change = f.get("vs_small_table")
    mark = "!" if change is not None and change < -DEGRADATION_LIMIT else " "
    return f"{f['jobs_per_s']:>13,.0f}" + (
        f" ({change:+5.0%}){mark}" if change is not None else " " * 10)


def _claim(f: dict[str, Any]) -> str:
    change = f.get("claim_vs_small_table")
    return f"{f['claim_p50_ms']:>7.2f} / {f['claim_p99_ms']:>6.2f}" + (
        f" ({change:+4.0%})" if change is not None else " " * 8)


def render(plans: list[dict[str, Any]], summary: dict[str, Any], systems: list[str]) -> str:
    lines = ["throughput, jobs/s (median; change against the system's own first figure):"]
    head = f"  {'point':<38}" + "".join(f"{s:>24}" for s in systems)
    peers = [s for s in systems if s != "jobwarden"]
    if "jobwarden" in systems:
        head += "".join(f"{'jw/' + p[:5]:>10}" for p in peers)
    lines.append(head + "   load")
    for plan in plans:
        row = summary[plan["name"]]
        text = _row(plan["name"], row, systems, _throughput, "jobs_per_s")
        loads = [v for f in row.values() for v in f["load"]]
        if loads:
            text += f"   {min(loads):.1f}-{max(loads):.1f}"
        lines.append(text)
    lines.append("claim latency p50 / p99, ms (median; p50 change against the first figure):")
    lines.append(head)
    for plan in plans:
        if plan["curve"] == "sizes":
            lines.append(_row(plan["name"], summary[plan["name"]], systems, _claim, "claim_p50"))
    if any("server_ms_per_job" in f for row in summary.values() for f in row.values()):
        lines.append("server time per job (pg_stat_statements: ms executing statements other"
                     " than COMMIT, buffers touched):")
        for plan in plans:
            row = summary[plan["name"]]
            text = f"  {plan['name']:<38}"
            for name in systems:
                f = row.get(name, {})
                text += (f"{f['server_ms_per_job']:>13.3f} ms {f['server_buffers_per_job']:>5.0f} b"
                         if "server_ms_per_job" in f else f"{'-':>24}")
            lines.append(text)
    lines.append(f"('!': more than {DEGRADATION_LIMIT:.0%} below the system's own first figure;"
                 " jw/x: Jobwarden's figure over the peer's -- above 1 is faster throughput,"
                 " below 1 a faster claim)")
    return "\n".join(lines)


async def curves(args: argparse.Namespace, systems: list[base.System],
                 record: dict[str, Any]) -> None:
    plans = _plans(args)
    names = [s.name for s in systems]
    runs: list[dict[str, Any]] = record["runs"]
    for rep in range(args.reps):
        print(f"repetition {rep + 1} of {args.reps} (load {load():.1f})", flush=True)
        for plan in plans:
            order = systems[rep % len(systems):] + systems[:rep % len(systems)]
            for system in order:
                entry: dict[str, Any] = {"rep": rep, "system": system.name,
                                         "scenario": plan["name"], **plan}
                try:
                    entry.update(await point(
                        system, args.dsn, f"{args.db_prefix}{system.name}",
                        pending=plan["pending"], completed=plan["completed"],
                        processes=plan["processes"], samples=args.samples,
                        drain_jobs=min(args.drain, plan["pending"]),
                        drain_seconds=args.drain_seconds, timeout=args.timeout))
                except Exception as exc:  # recorded; the other points still run
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    record["errors"].append(f"{system.name} {plan['name']}: {entry['error']}")
                    print(f"  FAILED {system.name} {plan['name']}: {entry['error']}", flush=True)
                    runs.append(entry)
                    continue
                runs.append(entry)
                server = entry.get("server")
                print(f"  {system.name:<14} {plan['name']:<38} "
                      f"{entry['drain']['jobs_per_s']:8,.0f} jobs/s ({entry['drain']['jobs']:>6,}"
                      f" jobs)   claim p50/p99 "
                      f"{entry['claim']['p50_ms']:6.2f} / {entry['claim']['p99_ms']:6.2f} ms"
                      f"   fill {entry['fill_seconds']:5.1f} s"
                      + (f"   server {server['exec_ms_per_job_without_commit']:.3f} ms/job"
                   if server else "")
                      + "   load "
                      f"{entry['load_before']:.1f}-{entry['load_after']:.1f}", flush=True)
    if runs:
        record["summary"] = summarize(plans, runs, names)
        record["table"] = render(plans, record["summary"], names)
        print(record["table"], flush=True)


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
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                   help="comma-separated systems side by side (default: all)")
    p.add_argument("--allow-missing", action="store_true",
                   help="skip systems that cannot be loaded instead of failing")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, one repetition, a 2 s soak: a smoke test, not a measurement")
    p.add_argument("--drain", type=int, default=None, help="jobs drained per figure (10,000)")
    p.add_argument("--drain-seconds", type=float, default=15.0,
                   help="at most this long per drain (the jobs started by then count)")
    p.add_argument("--sizes", default=None,
                   help="pending rows of the table-size curve (10000,100000,1000000)")
    p.add_argument("--completed", type=int, default=None,
                   help="completed rows beside the small table's jobs (1,000,000; 0: skip)")
    p.add_argument("--processes", default=None, help="worker processes of that curve (1,2,4,8)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (interleaved; medians)")
    p.add_argument("--samples", type=int, default=None, help="single-job claims timed (200)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per drain")
    p.add_argument("--soak", type=float, default=None, help="soak seconds (0: no soak)")
    p.add_argument("--rate", type=int, default=None, help="soak: jobs enqueued per second")
    p.add_argument("--soak-retention", default="completed=2m")
    p.add_argument("--soak-every", type=float, default=None, help="soak: seconds per sample")
    p.add_argument("--only", choices=["sizes", "processes", "soak"], action="append")
    p.add_argument("--db-prefix", default="bench_growth_",
                   help="prefix of the scratch databases (created and dropped)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON record (default bench/results/growth-<date>.json; none with"
                        " --quick unless given)")
    args = p.parse_args(argv)
    defaults = ({"drain": 40, "sizes": "40", "completed": 100, "processes": "1,2",
                 "reps": 1, "samples": 10, "soak": 2.0, "rate": 20, "soak_every": 1.0}
                if args.quick else
                {"drain": 10_000, "sizes": "10000,100000,1000000", "completed": 1_000_000,
                 "processes": "1,2,4,8", "reps": 2, "samples": 200, "soak": 0.0,
                 "rate": 200, "soak_every": 15.0})
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    loaded = adapters.load_all([n.strip() for n in args.systems.split(",") if n.strip()],
                               allow_missing=args.allow_missing, verb="measure")
    if loaded is None:
        return 2
    systems: list[base.System] = loaded
    facts = databases.server_facts(args.dsn)
    print(f"server: {facts}")
    started = datetime.datetime.now(datetime.UTC)
    record: dict[str, Any] = {
        "command": "python -m bench.growth " + " ".join(sys.argv[1:] if argv is None else argv),
        "server": facts, "started": started.isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": os.getloadavg()},
        "systems": {s.name: s.describe() for s in systems},
        "sizes": {k: getattr(args, k) for k in ("drain", "drain_seconds", "sizes", "completed",
                                                 "processes", "reps", "samples")},
        "runs": [], "errors": []}
    asyncio.run(curves(args, systems, record))
    only = set(args.only or ["sizes", "processes", "soak"])
    if "soak" in only and args.soak > 0:
        print(f"soak (Jobwarden): {args.soak:g} s at {args.rate} jobs/s, retention "
              f"{args.soak_retention}", flush=True)
        record["soak"] = soak(args.dsn, seconds=args.soak, rate=args.rate,
                              retention=args.soak_retention, every=args.soak_every,
                              dbname=f"{args.db_prefix}soak")
    record["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    record["machine"]["loadavg_after"] = os.getloadavg()
    out = args.out or (None if args.quick else RESULTS / f"growth-{started:%Y-%m-%d}.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1, default=str) + "\n")
        print(f"written: {out}")
    if record["errors"]:
        print("failed points:\n  " + "\n  ".join(record["errors"]))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
