"""``python -m bench.schedules``: the schedule runner against a plain batch insert.

The question (issue 4): what does one ``enqueue_due()`` pass cost when 10,000
schedules are all due at once (a runner coming back, or a minute boundary
every schedule shares), compared with the cheapest possible way to write the
same 10,000 job rows -- one ``db.jobs.insert_many`` call with the same unique
keys -- measured on the same server in the same run? The ratio is what we
record in docs/benchmarks.md; absolute numbers depend on the machine.

Each repetition resets the state outside the timed part (every schedule due
with exactly one slot in its catch-up window, the jobs table empty) and then
times, interleaved, the batch insert and one ``enqueue_due`` pass per
expression kind. The figure is the median over repetitions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/schedules.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg.types.json import Jsonb

from bench import databases, measure
from jobwarden.db.database import Database
from jobwarden.schedules import runner, store
from jobwarden.structs.jobs import JobSpec

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA = "jobwarden"
JOB = "bench.schedules:Nothing"
#: Expression kinds measured: an interval is integer arithmetic; a cron expression in
#: a DST zone goes through cronsim and the wall-time mapping.
KINDS: dict[str, dict[str, str]] = {
    "interval": {"interval": "1m"},
    "cron": {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"},
}
#: How far back each reset puts the planning point: one slot of each kind inside it.
RESET_BACK = {"interval": dt.timedelta(seconds=61), "cron": dt.timedelta(minutes=5, seconds=1)}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__)
    p.add_argument("--dsn", default=os.environ.get("JOBWARDEN_BENCH_DSN", DEFAULT_DSN),
                   help="server to use (the harness creates and drops its own database)")
    p.add_argument("--schedules", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="1,000 schedules, 1 repetition")
    p.add_argument("--json", dest="json_path", default=None,
                   help="where to write the JSON record (default bench/results/"
                        "schedules-<date>.json; none with --quick; '-' for none)")
    p.add_argument("--db-name", default="bench_schedules")
    return p


def _create(db: Database, kind: str, count: int) -> None:
    """Insert ``count`` validated schedules of one kind in one pipelined round trip."""
    specs = [store.validate(f"{kind}-{n:05d}", job_class=JOB, data={"n": n},
                            **KINDS[kind]) for n in range(count)]  # type: ignore[arg-type]
    rows = [(s.name, s.expression, s.cron, s.interval_seconds, s.timezone, s.job_class,
             Jsonb(s.data), s.spec_hash) for s in specs]
    with psycopg.connect(db.dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {SCHEMA}.schedules (name, expression, cron, interval_seconds, "  # noqa: S608
            "timezone, job_class, data, queue, priority, spec_hash, next_slot) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, 'default', 0, %s, now())", rows)


def _reset(dsn: str, due: str | None = None) -> None:
    """Schedules of kind ``due`` due with one slot in their window, the others not; no jobs.

    Not timed; ends with VACUUM ANALYZE, as autovacuum would leave the tables. Moving
    a planning point back is something only this reset does (the store never
    does), so it also deletes the history of the slots after the new planning
    point, as it truncates their jobs: a pass then records those slots' fates as a
    real pass does, with new rows (before round 5 it merged them into the rows the
    previous repetition left, which the runner's plain history insert refuses).
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {SCHEMA}.jobs CASCADE")
        for kind, back in RESET_BACK.items():
            if kind == due:
                conn.execute(
                    f"UPDATE {SCHEMA}.schedules SET planned_until = now() - %s, "  # noqa: S608
                    "next_slot = now() - %s, last_slot = NULL, last_job_id = NULL, "
                    "enqueued_count = 0, missed_count = 0, skipped_count = 0 "
                    "WHERE name LIKE %s", (back, dt.timedelta(seconds=1), f"{kind}-%"))
                conn.execute(f"DELETE FROM {SCHEMA}.schedule_slots AS h "  # noqa: S608
                             f"USING {SCHEMA}.schedules AS s WHERE s.name = h.schedule_name "
                             "AND h.slot > s.planned_until AND s.name LIKE %s", (f"{kind}-%",))
            else:
                conn.execute(f"UPDATE {SCHEMA}.schedules SET next_slot = now() "  # noqa: S608
                             "+ interval '1 day' WHERE name LIKE %s", (f"{kind}-%",))
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.schedules")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.schedule_slots")


def _batch_specs(count: int) -> list[JobSpec]:
    slot = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    return [JobSpec(job_class=JOB, data={"n": n}, unique_key=store.slot_key(f"batch-{n:05d}", slot),
                    schedule_name=f"batch-{n:05d}") for n in range(count)]


class _Waits:
    """Counts the client's waits on the server (psycopg ``Connection.wait`` calls):
    round trips, a figure the machine's load does not move."""

    count = 0
    _wrapped = psycopg.Connection.wait

    @classmethod
    def install(cls) -> None:
        def wait(conn: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
            cls.count += 1
            return cls._wrapped(conn, gen, *args, **kwargs)

        psycopg.Connection.wait = wait  # type: ignore[method-assign]


def _time_batch(db: Database, count: int) -> tuple[float, float, int]:
    """Wall and client CPU seconds and waits of one batch insert (CPU and waits: what
    load hardly moves)."""
    specs = _batch_specs(count)
    _Waits.count = 0
    started, cpu = time.perf_counter(), time.process_time()
    db.jobs.insert_many(specs)
    return time.perf_counter() - started, time.process_time() - cpu, _Waits.count


def _time_runner(db: Database, kind: str,
                 count: int) -> tuple[float, float, int, dict[str, Any]]:
    _Waits.count = 0
    started, cpu = time.perf_counter(), time.process_time()
    report = runner.enqueue_due(db, limit=count)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    if report.enqueued != count or report.errors:
        raise RuntimeError(f"{kind}: expected {count} enqueued, got {report}")
    return seconds, cpu_seconds, _Waits.count, report.as_json()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    count = 1_000 if args.quick else args.schedules
    reps = 1 if args.quick else args.reps
    timings: dict[str, list[float]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    cpu: dict[str, list[float]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    waits: dict[str, list[int]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    loads: list[float] = []
    _Waits.install()
    with databases.fresh_database(args.dsn, args.db_name) as dsn:
        facts = databases.server_facts(dsn)
        with Database(dsn, schema=SCHEMA, min_size=1, max_size=4) as db:
            db.migrate()
            for kind in KINDS:
                _create(db, kind, count)
            # Repetition 0 warms up (connections, prepared statements, caches) and is
            # not recorded.
            for rep in range(reps + 1):
                load = os.getloadavg()[0]
                print(f"repetition {rep}/{reps} (load {load:.1f})"
                      + (" warm-up" if rep == 0 else ""), file=sys.stderr)
                if rep:
                    loads.append(load)
                _reset(dsn)
                batch_seconds, batch_cpu, batch_waits = _time_batch(db, count)
                if rep:
                    timings["batch_insert"].append(batch_seconds)
                    cpu["batch_insert"].append(batch_cpu)
                    waits["batch_insert"].append(batch_waits)
                for kind in KINDS:
                    _reset(dsn, kind)
                    seconds, cpu_seconds, kind_waits, report = _time_runner(db, kind, count)
                    if rep:
                        timings[kind].append(seconds)
                        cpu[kind].append(cpu_seconds)
                        waits[kind].append(kind_waits)
                    print(f"  {kind}: {seconds:.3f}s (client CPU {cpu_seconds:.3f}s, "
                          f"{kind_waits} waits) {report}", file=sys.stderr)
    medians = {key: measure.median(values) for key, values in timings.items()}
    cpu_medians = {key: measure.median(values) for key, values in cpu.items()}
    batch = medians["batch_insert"]
    print(f"\n{count:,} schedules all due, median of {reps} (seconds; ratio to the batch "
          "insert of the same number of job rows; client CPU seconds beside)")
    print(f"{'batch insert (insert_many)':<34} {batch:8.3f}s  1.0x  "
          f"CPU {cpu_medians['batch_insert']:.3f}s  waits {waits['batch_insert'][-1]}")
    for kind in KINDS:
        label = f"enqueue_due, {kind} schedules"
        print(f"{label:<34} {medians[kind]:8.3f}s  {medians[kind] / batch:.1f}x  "
              f"CPU {cpu_medians[kind]:.3f}s  waits {waits[kind][-1]}")
    record = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "schedules": count, "reps": reps, "timings": timings, "medians": medians,
        "client_cpu": cpu, "client_cpu_medians": cpu_medians, "client_waits": waits,
        "ratios": {kind: medians[kind] / batch for kind in KINDS},
        "load_averages": loads, "server": facts, "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    path = args.json_path or (None if args.quick else str(
        RESULTS_DIR / f"schedules-{dt.date.today().isoformat()}.json"))
    if path and path != "-":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


class Nothing:
    """Stand-in job path; the benchmark never runs the jobs it enqueues."""


if __name__ == "__main__":
    raise SystemExit(main())
