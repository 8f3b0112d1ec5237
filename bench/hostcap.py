"""``python -m bench.hostcap``: how idle a capped host sits when its processes share the cap.

Three worker processes register the same host name with a per-host cap of 2
(``jobwarden worker --host-cap 2``, out-of-the-box poll interval of 1 s), so at
most two jobs run on the host at any moment. ``--jobs`` jobs that each sleep
``--job-ms`` are enqueued at once; the host could finish them in
``jobs * job_ms / cap``. The figure is the **idle fraction** of the cap:

    1 - (jobs * job duration) / (cap * (last finish - first claim))

on the database clock (``claimed_at`` / ``finished_at`` of the rows), i.e. the
share of the time a unit of the cap was free while work was waiting. Each
repetition uses a fresh database and fresh processes.

``--pythonpath DIR`` runs the worker processes on another checkout's package
(e.g. the commit before a change) so a before/after pair is measured in one
run, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

import jobwarden
from bench import databases

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
HOST = "bench-shared-host"
CAP = 2
PROCESSES = 3


@jobwarden.job(max_retries=0)
def nap(ms: float) -> None:
    time.sleep(ms / 1000.0)


def _one(dsn: str, *, jobs: int, job_ms: float, pythonpath: str | None,
         timeout: float) -> dict[str, float]:
    with databases.fresh_database(dsn, "i16_hostcap") as db_dsn:
        with jobwarden.Client(db_dsn) as client:
            client.db.migrate()
        env = {**os.environ, "JOBWARDEN_DSN": db_dsn}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        else:
            env.pop("PYTHONPATH", None)
        root = Path(__file__).resolve().parent.parent
        workers = [subprocess.Popen(
            [sys.executable, "-m", "jobwarden", "worker", "--app", "bench.hostcap",
             "--host", HOST, "--host-cap", str(CAP), "--concurrency", str(CAP)],
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(PROCESSES)]
        try:
            with jobwarden.Client(db_dsn) as client:
                deadline = time.monotonic() + 60
                while sum(h.processes for h in client.hosts.status()) < PROCESSES:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the worker processes did not register")
                    time.sleep(0.1)
                # By its module's import path: run as ``-m`` this module is __main__.
                from bench.hostcap import nap as job

                client.enqueue_many(job, [{"ms": job_ms}] * jobs)
                deadline = time.monotonic() + timeout
                while client.stats().get("default", {}).get("completed", 0) < jobs:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the jobs did not finish")
                    time.sleep(0.1)
            with psycopg.connect(db_dsn) as conn:
                row = conn.execute(
                    "SELECT extract(epoch FROM max(finished_at) - min(claimed_at))"
                    " FROM jobwarden.jobs").fetchone()
            assert row is not None
            makespan = float(row[0])
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    worker.kill()
    busy = jobs * job_ms / 1000.0
    return {"makespan_s": makespan, "ideal_s": busy / CAP,
            "idle_fraction": max(0.0, 1.0 - busy / (CAP * makespan))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostcap", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", default=os.environ.get("JOBWARDEN_BENCH_DSN", DEFAULT_DSN))
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--job-ms", type=float, default=50.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--pythonpath", default=None,
                   help="also measure the workers on this package path ('before'), interleaved")
    args = p.parse_args(argv)
    variants: dict[str, str | None] = {"this checkout": None}
    if args.pythonpath:
        variants = {"before (--pythonpath)": args.pythonpath, "this checkout": None}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    loads: list[float] = []
    for _rep in range(args.reps):
        for name, path in variants.items():
            loads.append(os.getloadavg()[0])
            results[name].append(_one(args.dsn, jobs=args.jobs, job_ms=args.job_ms,
                                      pythonpath=path, timeout=args.timeout))
    print(f"{PROCESSES} processes on one host, cap {CAP}, {args.jobs} jobs of "
          f"{args.job_ms:g} ms; load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
    summary: dict[str, Any] = {"loads": loads, "runs": results}
    for name, runs in results.items():
        idle = statistics.median(r["idle_fraction"] for r in runs)
        span = statistics.median(r["makespan_s"] for r in runs)
        print(f"  {name:<24} idle {idle:6.1%}  makespan {span:6.2f}s "
              f"(ideal {runs[0]['ideal_s']:.2f}s)  per rep: "
              + ", ".join(f"{r['idle_fraction']:.1%}" for r in runs))
        summary[name] = {"idle_fraction": idle, "makespan_s": span}
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
