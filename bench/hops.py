"""Where an idle worker's enqueue-to-start time goes: ``python -m bench.hops``.

The latency measure (``bench.measure.trickle``) gives one number per job. This
tool puts a timestamp on every hop of that path, for the same workload (an
out-of-the-box worker in its own process, a no-op job enqueued every
``--interval`` seconds by a client in this process), by wrapping the worker's
own functions from outside (nothing in ``jobwarden`` knows about it):

==================  =========================================================
``enqueue``         the client's enqueue call: request built, insert, commit (since
                    issue 16's fifth round the job is visible before the call
                    returns: the call also waits for the WAL flush, which the
                    worker no longer waits for, so this hop is off the path)
``to-notify``       the call's start to the commit's NOTIFY read by the listener
``to-claim``        the NOTIFY read to the claim sent (before issue 16's fourth round
                    a hand-off from the listen thread to the fetch thread)
``claim``           the claim's round trip (sent to rows returned)
``hand-off``        rows returned to the attempt starting in its slot thread
``body``            the attempt's start to the first line of the job body
==================  =========================================================

All timestamps are ``time.perf_counter`` (CLOCK_MONOTONIC, one clock for both
processes). Each hop's median and p99 in ms is printed, beside the end-to-end
figure the bench would report, and the client's CPU time per enqueue.
Diagnostic only: the figures the issue is judged by come from ``python -m
bench --measure latency``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

SCHEMA = "jobwarden"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def _worker(dsn: str, out: str, total: int) -> None:
    """The child: an out-of-the-box worker with every hop timestamped."""
    import threading

    from bench.adapters import jobwarden_adapter
    from jobwarden import settings as jw_settings
    from jobwarden.assembly import build_worker
    from jobwarden.db import database
    from jobwarden.db.jobs import JobsTable
    from jobwarden.worker import claiming, running

    now = time.perf_counter
    notified: list[float] = []
    claims: dict[int, tuple[float, float]] = {}
    executing: dict[int, float] = {}
    bodies: dict[int, float] = {}
    done = threading.Event()

    wait = database.Listener.wait

    threads: dict[str, set[int]] = {"notify": set(), "claim": set(), "execute": set()}

    def listener_wait(self: database.Listener, timeout: float) -> list[tuple[str, str]]:
        received = wait(self, timeout)
        if received:
            notified.append(now())
            threads["notify"].add(threading.get_ident())
        return received

    database.Listener.wait = listener_wait  # type: ignore[method-assign]

    claim = JobsTable.claim

    def timed_claim(self: JobsTable, **kwargs: Any) -> Any:
        sent = now()
        threads["claim"].add(threading.get_ident())
        found = claim(self, **kwargs)
        returned = now()
        for c in found:
            claims[int(c.data["i"])] = (sent, returned)
        return found

    JobsTable.claim = timed_claim  # type: ignore[method-assign]

    claim_idle = JobsTable.claim_idle

    def timed_claim_idle(self: JobsTable, **kwargs: Any) -> Any:
        # A worker whose last round found nothing claims this way (the claim and
        # the next due time in one message): a trickle's claims mostly come here.
        sent = now()
        threads["claim"].add(threading.get_ident())
        found, due = claim_idle(self, **kwargs)
        returned = now()
        for c in found:
            claims[int(c.data["i"])] = (sent, returned)
        return found, due

    JobsTable.claim_idle = timed_claim_idle  # type: ignore[method-assign]

    execute = running.AttemptRunner.execute

    def timed_execute(self: running.AttemptRunner, attempt: Any) -> None:
        executing[int(attempt.claim.data["i"])] = now()
        threads["execute"].add(threading.get_ident())
        execute(self, attempt)

    running.AttemptRunner.execute = timed_execute  # type: ignore[method-assign]

    def on_job(i: int) -> None:
        bodies[i] = now()
        if len(bodies) >= total:
            done.set()

    jobwarden_adapter._on_job = on_job
    with database.Database(dsn, schema=SCHEMA) as db:
        worker = build_worker(db, jw_settings.WorkerSettings(http_port=None))
        claimer: claiming.Claimer = worker.claimer
        worker.start()
        claimer.listening.wait(30)
        time.sleep(1.0)
        print("ready", flush=True)
        cpu = time.process_time()
        done.wait(total * 1.0 + 60)
        cpu = time.process_time() - cpu
        worker.stop()
    with open(out, "w") as f:
        json.dump({"notified": notified, "claims": claims,
                   "executing": executing, "bodies": bodies, "worker_cpu": cpu,
                   "threads": {k: sorted(v) for k, v in threads.items()}}, f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hops")
    parser.add_argument("--dsn", required=True, help="server with the jobwarden schema")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--json", default=None, help="write the per-hop figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    total = args.jobs + args.warmup
    if args.child:
        _worker(args.dsn, args.child, total)
        return 0

    import psycopg

    import jobwarden
    from bench.adapters import jobwarden_adapter
    from jobwarden.db.database import Database

    with Database(args.dsn, schema=SCHEMA) as db:
        db.migrate()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {SCHEMA}.jobs CASCADE")
        statements = conn.execute("SELECT 1 FROM pg_extension"
                                  " WHERE extname = 'pg_stat_statements'").fetchone()
        if statements:
            conn.execute("SELECT pg_stat_statements_reset()")
    handle, out = tempfile.mkstemp(prefix="hops-", suffix=".json")
    os.close(handle)
    child = subprocess.Popen([sys.executable, "-m", "bench.hops", "--dsn", args.dsn,
                              "--child", out, "--jobs", str(args.jobs),
                              "--warmup", str(args.warmup)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit("the worker did not start")
    before: dict[int, float] = {}
    after: dict[int, float] = {}
    cpu = 0.0
    with jobwarden.Client(args.dsn, schema=SCHEMA) as client:
        started = time.perf_counter()
        for k in range(total):
            delay = started + k * args.interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            c0 = time.process_time()
            before[k] = time.perf_counter()
            client.enqueue(jobwarden_adapter.noop, {"i": k})
            after[k] = time.perf_counter()
            cpu += time.process_time() - c0
    child.wait(timeout=total * 1.0 + 90)
    with open(out) as f:
        seen = json.load(f)
    os.unlink(out)
    notified = sorted(seen["notified"])

    def first_after(times: list[float], t: float) -> float:
        return next((x for x in times if x >= t), float("nan"))

    hops: dict[str, list[float]] = {name: [] for name in
                                    ("enqueue", "to-notify", "to-claim", "claim", "hand-off",
                                     "body", "total")}
    for k in range(args.warmup, total):
        sent, returned = seen["claims"][str(k)]
        n = first_after(notified, before[k])
        steps = {
            "enqueue": after[k] - before[k],
            "to-notify": n - before[k],
            "to-claim": sent - n,
            "claim": returned - sent,
            "hand-off": seen["executing"][str(k)] - returned,
            "body": seen["bodies"][str(k)] - seen["executing"][str(k)],
            "total": seen["bodies"][str(k)] - before[k],
        }
        for name, value in steps.items():
            hops[name].append(value * 1000)
    report = {name: {"p50": _percentile(v, 50), "p99": _percentile(v, 99)}
              for name, v in hops.items()}
    report["client_cpu_per_enqueue_ms"] = {"mean": cpu / total * 1000}
    report["worker_cpu_per_job_ms"] = {"mean": seen["worker_cpu"] / total * 1000}
    # Distinct threads on the path NOTIFY -> claim -> start (hand-offs = changes).
    path = [seen["threads"][k] for k in ("notify", "claim", "execute")]
    report["threads_on_path"] = {k: len(v) for k, v in zip(("notify", "claim", "execute"),
                                                              path, strict=True)}
    report["listener_claims"] = {"same_thread": float(bool(set(path[0]) & set(path[1])))}
    if statements:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70), calls,"
                " (total_plan_time + total_exec_time) / calls, total_plan_time / calls"
                " FROM pg_stat_statements WHERE calls >= %s ORDER BY 3 DESC LIMIT 8",
                (args.jobs,)).fetchall()
        report["server_ms_per_call"] = {str(r[0]): {"calls": r[1], "plan+exec": r[2],
                                                    "plan": r[3]} for r in rows}
    report["loadavg"] = {"1min": os.getloadavg()[0]}
    print(f"{'hop':<10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, v in report.items():
        if "p50" in v:
            print(f"{name:<10} {v['p50']:>8.3f} {v['p99']:>8.3f}")
    print(f"client CPU per enqueue {cpu / total * 1000:.3f} ms; worker CPU per job "
          f"{seen['worker_cpu'] / total * 1000:.3f} ms; threads on the path "
          f"{report['threads_on_path']}; load {os.getloadavg()[0]:.2f}")
    for query, figures in report.get("server_ms_per_call", {}).items():
        print(f"  server {figures['plan+exec']:.3f} ms/call (plan {figures['plan']:.3f})"
              f" x{figures['calls']}: {query}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
