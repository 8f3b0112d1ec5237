"""``python -m bench.cronjob``: a JobSchedule's pod per run against a native CronJob.

Both run the same job code (tests/support/startclock.py: it reads the wall clock first
thing, then writes it with its pod's name to the database), and both kinds of pod are
processes of the same host, so every time below is one clock's.

``startup`` (no control plane): the process alone, spawned N times each, alternately --
``jobwarden run-job`` for a claimed pod run of the start clock job (imports, connects,
starts fenced under the claim, then the job's code) and ``python -m
tests.support.startclock`` (a CronJob container's program: the interpreter, then the
code). Reported: spawn to job code, p50/p99 for each, and their ratio. ``--compare-tree
DIR`` (a checkout of another commit, e.g. ``git worktree add DIR <commit>``) adds that
tree's ``run-job``, spawned in turn with the others: before and after at the same load.

``plane`` (the real control plane of tests/cluster, its controller manager running the
CronJob and Job controllers, the process kubelet running every pod): a pod-per-run
JobSchedule and a CronJob with the same schedule (``* * * * *``) and the same job code,
side by side for ``--slots`` minutes. Reported for each: slot to job code p50/p99 (the
slot's wall time to the clock the code read), and for the JobSchedule its parts (slot to
claim: the pod's ``jobwarden.io/claimed-at``; claim to job code). Then, unless
``--no-restarts``, at two slot boundaries: the operator's process is killed one second
before the slot (the kubelet restarts it), and the controller manager is killed one
second before a slot (and started again at once, as its supervisor would): for each
kind, how many times that slot's code ran (0: missed, 2: doubled) and how late.

Bytecode: an image has it (pip compiles every module it installs), a source checkout
run with ``PYTHONDONTWRITEBYTECODE`` (this machine, the test harness) compiles every
module at every start. So by default both kinds of process run with a compiled cache
(``PYTHONPYCACHEPREFIX``, a temporary directory, filled once before measuring), as in the
image; ``--no-bytecode`` measures the source checkout as it is.

The load average before and after is part of every record; on the shared 2-core machine
the figures move with it, so read them as ratios within one run. Nothing is asserted.
Exit 3 (one line) where the kube tools or openssl are missing (``plane``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench.podstart import quantile
from jobwarden.api.client import Client
from jobwarden.db.database import Database
from tests.support import startclock
from tests.support.postgres import DatabaseFactory, server_dsn

REPO = Path(__file__).resolve().parents[1]
POD_RUN = "JobSchedule/bench/start-clock"
JOB = "tests.support.startclockjob:StartClock"


def figures(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(quantile(values, 0.5), 3),
            "p99": round(quantile(values, 0.99), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


@contextlib.contextmanager
def bench_database(admin_dsn: str | None, tag: str) -> Iterator[str]:
    """A fresh migrated database with the start clock's table, dropped at the end (on an
    embedded server of its own when no DSN is given)."""
    embedded = None
    if admin_dsn is None:
        admin_dsn, embedded = server_dsn()
    factory = DatabaseFactory(admin_dsn, tag=tag)
    dsn = factory.create()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(startclock.DDL)
        yield dsn
    finally:
        factory.drop(dsn)
        factory.close()
        if embedded is not None:
            embedded.close()


def clock_of(dsn: str, pod: str) -> float | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT at FROM public.startclock WHERE pod = %s",
                           (pod,)).fetchone()
    return None if row is None else float(row[0])


# -- startup: the processes alone --------------------------------------------------------

def _spawn(command: list[str], env: dict[str, str], *, code: Path | None = None) -> float:
    """Start ``command`` (Jobwarden from ``code``, a checkout's package directory, when
    given); the wall time just before the spawn, once it exited 0."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    path = [str(code)] if code is not None else []
    full.update({"PYTHONPATH": os.pathsep.join([*path, str(REPO)]), **env})
    began = time.time()
    proc = subprocess.run(command, env=full, cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{command[2:4]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return began


def startup(dsn: str, runs: int, compare: Path | None = None) -> dict[str, Any]:
    from jobwarden import podruns

    trees: dict[str, Path | None] = {"run-job": None}
    if compare is not None:
        trees["run-job@compare"] = compare / "operator"
        # Compiled as the other tree is (compiled_bytecode), when it is.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(compare / "operator")],
                       check=False, capture_output=True)
    rows: dict[str, list[float]] = {**{k: [] for k in trees}, "program": []}
    with Database(dsn, min_size=1, max_size=2) as db:
        client = Client(database=db)
        for i in range(runs):
            for label, code in trees.items():
                spec = client.spec(JOB, {}, pod_run=POD_RUN)
                job_id = client.enqueue_specs([spec])[0].id
                claims = podruns.claim_pod_runs(db, pod_runs=[POD_RUN], claimant="bench",
                                                start_deadline=120, limit=1).claims
                assert len(claims) == 1 and claims[0].job_id == job_id, claims
                pod = f"{label}-{i}"
                began = _spawn([sys.executable, "-m", "jobwarden", "run-job"], {
                    "JOBWARDEN_DSN": dsn, "JOBWARDEN_TEST_AUDIT_DSN": dsn, "POD_NAME": pod,
                    "JOBWARDEN_JOB_ID": str(job_id),
                    "JOBWARDEN_CLAIM_TOKEN": claims[0].claim_token,
                    "JOBWARDEN_APPS": "tests.support.startclockjob"}, code=code)
                at = clock_of(dsn, pod)
                assert at is not None, pod
                rows[label].append(at - began)
            pod = f"program-{i}"
            began = _spawn([sys.executable, "-m", "tests.support.startclock"],
                           {"JOBWARDEN_TEST_AUDIT_DSN": dsn, "POD_NAME": pod})
            at = clock_of(dsn, pod)
            assert at is not None, pod
            rows["program"].append(at - began)
    result = {kind: figures(values) for kind, values in rows.items()}
    result["ratio_p50"] = round(result["run-job"]["p50"] / result["program"]["p50"], 2)
    if compare is not None:
        result["ratio_p50_to_compare"] = round(
            result["run-job"]["p50"] / result["run-job@compare"]["p50"], 2)
    result["samples"] = {k: [round(v, 3) for v in values] for k, values in rows.items()}
    return result


@contextlib.contextmanager
def compiled_bytecode(enabled: bool) -> Iterator[None]:
    """Every process started from here (pods included: the process kubelet passes this
    process's environment on) reads bytecode compiled once, as from an image."""
    if not enabled:
        yield
        return
    saved = {k: os.environ.get(k) for k in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    with tempfile.TemporaryDirectory(prefix="jw-pycache-") as cache:
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "operator/jobwarden",
                        "tests"], cwd=REPO, check=False, capture_output=True)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# -- the command --------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cronjob", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["startup", "plane"])
    parser.add_argument("--runs", type=int, default=20, help="startup: spawns of each")
    parser.add_argument("--slots", type=int, default=10, help="plane: minutes measured")
    parser.add_argument("--no-restarts", action="store_true",
                        help="plane: skip the two restarts at a slot boundary")
    parser.add_argument("--operator-timings", choices=["chart", "test"], default="chart",
                        help="plane: the operator's intervals: the chart's defaults (schedule "
                             "check and status every 5 s) or the test harness's (0.2/0.5 s)")
    parser.add_argument("--compare-tree", type=Path, default=None,
                        help="startup: also run-job from this checkout (another commit)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="compile every module at every start (a source checkout under "
                             "PYTHONDONTWRITEBYTECODE), not read it compiled (an image)")
    parser.add_argument("--dsn", default=None,
                        help="an admin DSN (default: the tests' server, else an embedded one)")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args(argv)
    if args.runs < 2 or args.slots < 2:
        parser.error("--runs and --slots must be at least 2")
    load_before = os.getloadavg()
    started = time.monotonic()
    if args.mode == "startup":
        with bench_database(args.dsn, "cronjob") as dsn, compiled_bytecode(not args.no_bytecode):
            result = startup(dsn, args.runs, args.compare_tree)
    else:
        from bench import cronjobplane
        from tests.cluster import tools

        code = tools.plane_unavailable()
        if code is not None:
            print(f"bench.cronjob: {code}", file=sys.stderr)
            return 3
        with bench_database(args.dsn, "cronjob") as dsn, \
                compiled_bytecode(not args.no_bytecode), \
                tempfile.TemporaryDirectory(prefix="jw-cronjob-") as tmp:
            result = cronjobplane.measure(
                dsn, slots=args.slots, restarts=not args.no_restarts, workdir=Path(tmp),
                operator_env={} if args.operator_timings == "chart" else None)
            result["operator_timings"] = args.operator_timings
    record = {"bench": "cronjob", "mode": args.mode, "bytecode": not args.no_bytecode,
              "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                          "loadavg_after": os.getloadavg()},
              "wall_seconds": round(time.monotonic() - started, 1), **result}
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"bench.cronjob {args.mode}, load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}:")
    for key, value in result.items():
        if key not in ("samples", "slots"):
            print(f"  {key}: {json.dumps(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
