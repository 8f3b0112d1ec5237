"""``python -m bench.console``: console page latency with a million jobs in the table.

Fills a fresh database with ``--jobs`` rows (default 1,000,000) shaped like a busy
production table -- nearly all completed, some failed with tracebacks and attempt
history, a backlog of pending jobs over several queues -- then serves the
console for real (uvicorn on loopback, in this process) and times HTTP GETs of
the pages people wait on: the overview, the jobs list (unfiltered, by status and
queue, by text, a deep keyset page) and a job's detail page. Each page is
fetched ``--requests`` times after a warm-up; p50/p95/p99 go to stdout and, with
``--json``, to a file, together with the machine's load average before and after
(the machine is shared) and the server's settings. Target: p95 < 100 ms.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import psycopg
import uvicorn

import jobwarden
from bench import databases
from jobwarden.console.app import build_app
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database

FILL = """
INSERT INTO jobwarden.jobs (queue, job_class, data, priority, status, run_at, attempts,
                            max_retries, last_error, claimed_by, claimed_at, created_at,
                            updated_at, finished_at, result)
SELECT 'q' || (n %% 5), 'app.jobs:Task' || (n %% 20),
       jsonb_build_object('invoice_id', n, 'customer', 'customer-' || (n %% 1000)),
       n %% 3,
       (CASE WHEN n %% 100 < 95 THEN 'completed' WHEN n %% 100 < 98 THEN 'failed'
             ELSE 'pending' END)::jobwarden.job_status,
       now() - make_interval(secs => (%(n)s::bigint - n) * 0.05),
       CASE WHEN n %% 100 < 98 THEN 1 ELSE 0 END, 3,
       CASE WHEN n %% 100 BETWEEN 95 AND 97 THEN
            E'Traceback (most recent call last):\\n  File "app/jobs.py", line 7\\nKeyError: '
            || n END,
       CASE WHEN n %% 100 < 98 THEN 'worker-' || (n %% 8) END,
       CASE WHEN n %% 100 < 98 THEN now() - make_interval(secs => (%(n)s::bigint - n) * 0.05) END,
       now() - make_interval(secs => (%(n)s::bigint - n) * 0.05),
       now() - make_interval(secs => (%(n)s::bigint - n) * 0.05),
       CASE WHEN n %% 100 < 98 THEN now() - make_interval(secs => (%(n)s::bigint - n) * 0.05) END,
       CASE WHEN n %% 100 < 95 THEN jsonb_build_object('ok', true) END
FROM generate_series(%(start)s::bigint, %(end)s::bigint) AS n
"""

HISTORY = """
INSERT INTO jobwarden.job_attempts (job_id, slot, attempt, started_at, finished_at, host,
                                    outcome, status_after, error, traceback)
SELECT id, 1, 1, claimed_at, finished_at, claimed_by, 'failed', 'failed',
       regexp_replace(last_error, '^.*\\n', ''), last_error
FROM jobwarden.jobs WHERE status = 'failed'
"""


def fill(dsn: str, jobs: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(1, jobs + 1, 200_000):
            end = min(start + 199_999, jobs)
            conn.execute(FILL, {"start": start, "end": end, "n": jobs})
        conn.execute(HISTORY)
        conn.execute("VACUUM ANALYZE jobwarden.jobs")
        conn.execute("VACUUM ANALYZE jobwarden.job_attempts")
    return time.perf_counter() - started


@contextmanager
def serve(client: jobwarden.Client) -> Iterator[str]:
    app = build_app(client, ConsoleSettings())
    sock = socket.socket()
    # Accepted connections inherit this (Linux): without it, uvicorn's separate
    # writes of headers and body meet the client's delayed ACK (+40 ms per request
    # on a kept-alive connection). uvicorn sets it itself only on sockets it binds.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the console did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def chart_reads(database: Database, rounds: int) -> dict[str, float]:
    """The overview charts' query (jobs finished per minute): the hour a console
    process reads on its first view vs the last three minutes it reads on every
    refresh after (console/charts.py keeps the settled minutes), p50 of each."""
    now = database.jobs.now()
    spans = {"hour": 60, "three_minutes": 3}
    times: dict[str, list[float]] = {name: [] for name in spans}
    for _ in range(max(rounds, 5)):
        for name, minutes in spans.items():
            started = time.perf_counter()
            database.queues.finished_per_minute(now - datetime.timedelta(minutes=minutes))
            times[name].append((time.perf_counter() - started) * 1000)
    with psycopg.connect(database.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM jobwarden.jobs "
                           "WHERE finished_at >= now() - interval '1 hour'").fetchone()
    out = {f"{name}_p50_ms": round(statistics.median(values), 2)
           for name, values in times.items()}
    out["hour_rows"] = float(row[0]) if row else 0.0
    out["hour_over_three_minutes"] = round(out["hour_p50_ms"] / out["three_minutes_p50_ms"], 1)
    print(f"{'chart query, last hour':36} p50 {out['hour_p50_ms']:7.1f} ms  "
          f"({out['hour_rows']:.0f} rows); last 3 minutes p50 "
          f"{out['three_minutes_p50_ms']:.1f} ms ({out['hour_over_three_minutes']}x)",
          flush=True)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--dsn", default=os.environ.get("JOBWARDEN_BENCH_DSN",
                                                        "host=127.0.0.1 user=postgres"))
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--db", default="jobwarden_bench_console")
    parser.add_argument("--keep", action="store_true", help="keep the filled database")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    with databases.fresh_database(args.dsn, args.db, keep=args.keep) as dsn:
        database = Database(dsn, min_size=2, max_size=8, prepare_threshold=None)
        database.migrate()
        fill_seconds = fill(dsn, args.jobs)
        client = jobwarden.Client(database=database)
        with psycopg.connect(dsn) as conn:
            failed_row = conn.execute("SELECT max(id) FROM jobwarden.jobs "
                                      "WHERE status = 'failed'").fetchone()
            middle_row = conn.execute("SELECT max(id) / 2 FROM jobwarden.jobs").fetchone()
        assert failed_row is not None and middle_row is not None
        failed, middle = failed_row[0], middle_row[0]
        pages = {
            "overview": "/",
            "jobs": "/jobs",
            "jobs status=failed": "/jobs?status=failed",
            "jobs status=failed queue=q2": "/jobs?status=failed&queue=q2",
            "jobs status=pending class_prefix": "/jobs?status=pending&class_prefix=app.jobs:Task1",
            "jobs text=customer-7": "/jobs?text=customer-7",
            "jobs error=keyerror since=1h": "/jobs?error=keyerror&since=1h",
            "jobs deep page": f"/jobs?before={middle}",
            "job detail": f"/jobs/{failed}",
            "queues": "/queues",
        }
        results: dict[str, dict[str, float]] = {}
        with serve(client) as url, httpx2.Client(base_url=url, timeout=30) as http:
            for path in pages.values():
                for _ in range(5):
                    assert http.get(path).status_code == 200, path
            # Round robin, so a burst of load from the (shared) machine hits every page
            # alike instead of whichever page happened to be measured at the time.
            times: dict[str, list[float]] = {name: [] for name in pages}
            for _ in range(args.requests):
                for name, path in pages.items():
                    started = time.perf_counter()
                    response = http.get(path)
                    times[name].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200
            for name, values in times.items():
                results[name] = {"p50_ms": round(statistics.median(values), 2),
                                 "p95_ms": round(percentile(values, 0.95), 2),
                                 "p99_ms": round(percentile(values, 0.99), 2),
                                 "max_ms": round(max(values), 2)}
                print(f"{name:36} p50 {results[name]['p50_ms']:7.1f} ms  "
                      f"p95 {results[name]['p95_ms']:7.1f} ms  "
                      f"p99 {results[name]['p99_ms']:7.1f} ms", flush=True)
        charts = chart_reads(database, args.requests)
        database.close()
    load_after = os.getloadavg()
    report = {
        "benchmark": "console page latency", "jobs": args.jobs, "requests": args.requests,
        "fill_seconds": round(fill_seconds, 1),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after,
        "server": databases.server_facts(args.dsn), "pages": results,
        "target_p95_ms": 100, "charts": charts,
        "all_under_target": all(r["p95_ms"] < 100 for r in results.values()),
    }
    print(f"load average before {load_before}, after {load_after}; "
          f"{os.cpu_count()} CPUs; fill {fill_seconds:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
