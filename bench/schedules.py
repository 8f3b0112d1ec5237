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

``--compare REV [REV ...]`` measures other trees of the package in the same run:
each REV (a git revision, exported with ``git archive``; ``.`` is this
checkout's working tree) runs in a child process of its own, first on its
``PYTHONPATH``, with a database of its own migrated by that tree; the children
take turns repetition by repetition (the order reversed every other one), so
each figure is a ratio to the first REV's, measured at the same load. The
figures compared are the client's CPU seconds (``time.process_time`` of the
child: what a busy machine moves least), min and median. ``--planning N``
adds planning alone: the due schedules claimed in one transaction (rolled
back) and planned in memory ``N`` times, as one batch of the runner plans them
(no database work inside the timed part). Issue 29:

    python -m bench.schedules --schedules 3000 --reps 15 --planning 10 \\
        --compare d269e27 .
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # ``python bench/schedules.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg.types.json import Jsonb

from bench import databases, measure
from jobwarden.db import runnerpass
from jobwarden.db.database import Database
from jobwarden.schedules import planning, runner, store
from jobwarden.structs.jobs import JobSpec
from jobwarden.structs.schedules import DueSchedule, PassWrite, RunReport

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
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
    p.add_argument("--compare", nargs="+", metavar="REV", default=None,
                   help="measure these trees of the package, each in a child process, "
                        "interleaved: git revisions ('.' = this working tree); ratios to "
                        "the first")
    p.add_argument("--planning", type=int, default=0, metavar="N",
                   help="also time planning alone: the claimed schedules planned in "
                        "memory N times per repetition (client CPU, the minimum)")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a --compare child
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


def _planner(db: Database, tx: runnerpass.RunnerPass,
             at: dt.datetime) -> Callable[[Sequence[DueSchedule]], None]:
    """Plan ``due`` in memory as one batch of the measured tree's runner plans it.

    Through the runner's private entry point, whose shape changed: ``_plan(batch,
    schedule)`` since issue 29, the nine-argument ``_plan`` of 0.1.0 (with the error
    handling its caller had) before.
    """
    plan_one: Any = runner._plan
    tolerance = planning.DEFAULT_TOLERANCE_SECONDS
    if hasattr(runner, "_Batch"):
        def plan(due: Sequence[DueSchedule]) -> None:
            batch = runner._Batch(db, tx, at, tolerance, report=RunReport(checked=len(due)))
            for schedule in due:
                plan_one(batch, schedule)
        return plan

    def plan_010(due: Sequence[DueSchedule]) -> None:
        report, write = RunReport(checked=len(due)), PassWrite()
        rows: list[Any] = []
        plans: dict[tuple[object, ...], Any] = {}
        for schedule in due:
            try:
                plan_one(db, tx.conn, schedule, at, tolerance, plans, write, rows, report)
            except Exception:  # as 0.1.0's _attempt counted it
                report.errors += 1
    return plan_010


def _time_planning(db: Database, kind: str, count: int, times: int) -> list[float]:
    """Client CPU seconds of planning the ``count`` due schedules of ``kind`` in memory,
    ``times`` over; the claim is rolled back (the caller's reset made them due)."""
    with runnerpass.runner_pass(db) as tx:
        at, due = tx.claim(now=None, limit=count, after=None)
        if at is None or len(due) != count:
            raise RuntimeError(f"{kind}: expected {count} due, claimed {len(due)}")
        plan = _planner(db, tx, at)
        found = []
        for _ in range(times):
            gc.collect()  # each round starts from the same collector state
            cpu = time.process_time()
            plan(due)
            found.append(time.process_time() - cpu)
    return found


def _repetition(db: Database, dsn: str, count: int, planning_times: int) -> dict[str, Any]:
    """One repetition: the batch insert, then a pass (and planning alone, if asked) per
    expression kind, each from its reset state. Wall and CPU seconds, waits."""
    found: dict[str, Any] = {"load": os.getloadavg()[0]}
    _reset(dsn)
    found["batch_insert"] = _time_batch(db, count)
    for kind in KINDS:
        _reset(dsn, kind)
        seconds, cpu_seconds, kind_waits, report = _time_runner(db, kind, count)
        found[kind] = (seconds, cpu_seconds, kind_waits)
        found[f"{kind}_report"] = report
        if planning_times:
            _reset(dsn, kind)
            found[f"planning_{kind}"] = _time_planning(db, kind, count, planning_times)
    return found


@contextlib.contextmanager
def _prepared(dsn: str, db_name: str, count: int) -> Iterator[tuple[Database, str, dict[str, Any]]]:
    """A fresh database with ``count`` schedules of each kind; the Database, its DSN and
    the server's facts."""
    with databases.fresh_database(dsn, db_name) as db_dsn:
        facts = databases.server_facts(db_dsn)
        with Database(db_dsn, schema=SCHEMA, min_size=1, max_size=4) as db:
            db.migrate()
            for kind in KINDS:
                _create(db, kind, count)
            yield db, db_dsn, facts


def _serve(args: argparse.Namespace, count: int) -> int:
    """A ``--compare`` child: prepare, then one repetition per ``rep`` line on stdin,
    its figures as one JSON line on stdout."""
    import jobwarden

    with _prepared(args.dsn, args.db_name, count) as (db, dsn, facts):
        _answer({"package": str(Path(jobwarden.__file__).parent), "server": facts})
        for line in sys.stdin:
            if line.strip() != "rep":
                break
            _answer(_repetition(db, dsn, count, args.planning))
    return 0


def _answer(record: dict[str, Any]) -> None:
    print(json.dumps(record, default=str), flush=True)


class _Tree:
    """A ``--compare`` child: one tree of the package, its own process and database."""

    def __init__(self, label: str, pythonpath: Path, args: argparse.Namespace,
                 count: int, index: int) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(pythonpath), str(REPO), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.schedules", "--serve", "--dsn", args.dsn,
             "--schedules", str(count), "--planning", str(args.planning),
             "--db-name", f"{args.db_name}_{index}"],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.facts = self._read()
        self.reps: list[dict[str, Any]] = []

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the child exited ({self.process.wait()})")
        record: dict[str, Any] = json.loads(line)
        return record

    def repetition(self) -> dict[str, Any]:
        stdin: TextIO | None = self.process.stdin
        assert stdin is not None
        stdin.write("rep\n")
        stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=120)


def _export(rev: str, into: Path) -> Path:
    """The package directory of ``rev`` ('.': this working tree), exported by git archive."""
    if rev == ".":
        return REPO / "operator"
    target = into / rev.replace("/", "_")
    if not target.exists():
        target.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "operator"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "operator"


def _label(rev: str) -> str:
    """``rev`` as the figures name it: '.' is the working tree (at its commit)."""
    if rev != ".":
        return rev
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return f"worktree@{head}"


def _compare(args: argparse.Namespace, count: int, reps: int) -> dict[str, Any]:
    """The ``--compare`` run: the trees interleaved, figures per tree and ratios."""
    figures = ["batch_insert", *KINDS, *(f"planning_{k}" for k in KINDS if args.planning)]
    with tempfile.TemporaryDirectory(prefix="bench-schedules-") as tmp, \
            contextlib.ExitStack() as stack:
        trees: list[_Tree] = []
        for index, rev in enumerate(args.compare):
            label = _label(rev)
            if args.compare.count(rev) > 1:
                label += f"#{index}"
            tree = _Tree(label, _export(rev, Path(tmp)), args, count, index)
            stack.callback(tree.close)
            trees.append(tree)
            print(f"{tree.label}: {tree.facts['package']}", file=sys.stderr)
        for rep in range(reps + 1):  # repetition 0 warms up, not recorded
            order = trees if rep % 2 == 0 else trees[::-1]
            for tree in order:
                found = tree.repetition()
                cpu = {key: found[key][1] for key in ("batch_insert", *KINDS)}
                for kind in KINDS:
                    if args.planning:
                        cpu[f"planning_{kind}"] = min(found[f"planning_{kind}"])
                print(f"repetition {rep}/{reps} {tree.label} (load {found['load']:.1f})"
                      + (" warm-up" if rep == 0 else "") + ": client CPU "
                      + ", ".join(f"{k} {v:.4f}s" for k, v in cpu.items()), file=sys.stderr)
                if rep:
                    tree.reps.append({"load": found["load"], "client_cpu": cpu,
                                      "raw": found})
    ruler = trees[0]
    summary: dict[str, Any] = {}
    for tree in trees:
        summary[tree.label] = {
            figure: {"min": min(r["client_cpu"][figure] for r in tree.reps),
                     "median": measure.median([r["client_cpu"][figure] for r in tree.reps])}
            for figure in figures}
    loads = [r["load"] for tree in trees for r in tree.reps]
    print(f"\n{count:,} schedules all due, {reps} repetitions interleaved, load "
          f"{min(loads):.1f}-{max(loads):.1f}: client CPU seconds (min / median) and "
          f"ratios to {ruler.label} (min / median)")
    for figure in figures:
        print(f"{figure}:")
        base = summary[ruler.label][figure]
        for tree in trees:
            mine = summary[tree.label][figure]
            print(f"  {tree.label:<24} {mine['min']:.4f} / {mine['median']:.4f}s   "
                  f"{mine['min'] / base['min']:.3f} / {mine['median'] / base['median']:.3f}")
    return {
        "compare": [{"rev": rev, "label": tree.label}
                    for rev, tree in zip(args.compare, trees, strict=True)],
        "server": ruler.facts["server"], "summary": summary,
        "ratios": {tree.label: {figure: {
            stat: summary[tree.label][figure][stat] / summary[ruler.label][figure][stat]
            for stat in ("min", "median")} for figure in figures} for tree in trees},
        "repetitions": {tree.label: tree.reps for tree in trees},
        "load_averages": loads, "planning_times": args.planning,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    count = 1_000 if args.quick else args.schedules
    reps = 1 if args.quick else args.reps
    _Waits.install()
    if args.serve:
        return _serve(args, count)
    if args.compare:
        record = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                  "schedules": count, "reps": reps, **_compare(args, count, reps),
                  "python": platform.python_version(),
                  "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}
    else:
        record = _in_process(args, count, reps)
    path = args.json_path or (None if args.quick else str(
        RESULTS_DIR / f"schedules-{dt.date.today().isoformat()}.json"))
    if path and path != "-":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2, default=str) + "\n",
                              encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _in_process(args: argparse.Namespace, count: int, reps: int) -> dict[str, Any]:
    """This checkout's package, in this process: the figures of issue 4."""
    timings: dict[str, list[float]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    cpu: dict[str, list[float]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    waits: dict[str, list[int]] = {"batch_insert": [], **{k: [] for k in KINDS}}
    plans: dict[str, list[float]] = {k: [] for k in KINDS}
    loads: list[float] = []
    with _prepared(args.dsn, args.db_name, count) as (db, dsn, facts):
        # Repetition 0 warms up (connections, prepared statements, caches) and is
        # not recorded.
        for rep in range(reps + 1):
            found = _repetition(db, dsn, count, args.planning)
            print(f"repetition {rep}/{reps} (load {found['load']:.1f})"
                  + (" warm-up" if rep == 0 else ""), file=sys.stderr)
            for kind in KINDS:
                seconds, cpu_seconds, kind_waits = found[kind]
                print(f"  {kind}: {seconds:.3f}s (client CPU {cpu_seconds:.3f}s, "
                      f"{kind_waits} waits) {found[f'{kind}_report']}", file=sys.stderr)
            if not rep:
                continue
            loads.append(found["load"])
            for key in timings:
                timings[key].append(found[key][0])
                cpu[key].append(found[key][1])
                waits[key].append(found[key][2])
            for kind in KINDS:
                if args.planning:
                    plans[kind].append(min(found[f"planning_{kind}"]))
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
        if args.planning:
            print(f"{'  planning alone (min)':<34} CPU {min(plans[kind]):.4f}s")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "schedules": count, "reps": reps, "timings": timings, "medians": medians,
        "client_cpu": cpu, "client_cpu_medians": cpu_medians, "client_waits": waits,
        "ratios": {kind: medians[kind] / batch for kind in KINDS},
        **({"planning_cpu": plans} if args.planning else {}),
        "load_averages": loads, "server": facts, "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }


class Nothing:
    """Stand-in job path; the benchmark never runs the jobs it enqueues."""


if __name__ == "__main__":
    raise SystemExit(main())
