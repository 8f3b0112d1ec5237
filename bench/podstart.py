"""``python -m bench.podstart``: how long a pod run takes from the claim to a running container.

On a private real control plane (etcd, kube-apiserver, kube-controller-manager from
``scripts/build-kube-tools``) with the process kubelet of tests/e2e (node mode), the
operator installed by Helm runs a pod-per-run interval JobSchedule
(``tests.support.testjobs:Record``) until ``--runs`` pods have run. Reported, each as
p50/p95 over the runs:

* ``metric``: what the operator exports, ``jobwarden_pod_run_start_seconds{kind=
  "JobSchedule"}``, scraped from its /metrics and read as Prometheus'
  ``histogram_quantile`` reads it (linear within the buckets 1, 2, 5, 10... s);
* ``observed``: the exact values the histogram observed, recomputed from the same two
  fields -- the pod's ``jobwarden.io/claimed-at`` annotation (ms) and the container's
  ``startedAt`` (whole seconds: the API server's timestamps have no fraction);
* ``spawned``: claim -> the kubelet started the container's process (its own clock, ms);
* ``job_ran``: claim -> the job's code ran in the pod (the job's audit row, written by
  the database's clock_timestamp(); same host, same clock): interpreter start, imports,
  the fenced start of `jobwarden run-job`.

The load average before and after is part of the record: on the shared 2-core machine
every figure moves with it. Nothing is asserted (tests/cluster specifies behaviour).
Exit 3 (one line) where the kube tools or openssl are missing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import math
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from jobwarden.api.client import Client
from jobwarden.controller.podruns import pods as runpods
from jobwarden.db.database import Database
from tests.cluster import tools
from tests.cluster.conftest import open_cluster, started_plane
from tests.e2e import podrunscenarios as scenarios
from tests.support import testjobs
from tests.support.postgres import DatabaseFactory

METRIC = "jobwarden_pod_run_start_seconds"
NAME = "podstart"


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of ``values``, linear between the closest ranks."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def histogram(text: str, name: str, **labels: str) -> list[tuple[float, float]]:
    """The cumulative buckets ``(le, count)`` of one histogram series in /metrics text."""
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if not line.startswith(name + "_bucket{"):
            continue
        head, _, value = line.rpartition(" ")
        if not all(f'{k}="{v}"' in head for k, v in labels.items()):
            continue
        le = head.split('le="', 1)[1].split('"', 1)[0]
        buckets.append((math.inf if le == "+Inf" else float(le), float(value)))
    return sorted(buckets)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile``: the bucket holding rank q * count, linear inside
    it from the bucket below's bound (0 for the first); the highest finite bound when the
    rank falls in +Inf."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    below_le, below_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return below_le
            if count == below_count:
                return le
            return below_le + (le - below_le) * (rank - below_count) / (count - below_count)
        below_le, below_count = le, count
    return below_le


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def started_at(pod: dict[str, Any]) -> float | None:
    for state in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("running", "terminated"):
            raw = ((state.get("state") or {}).get(key) or {}).get("startedAt")
            if raw:
                return _epoch(raw)
    return None


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": round(quantile(values, 0.5), 3),
            "p95": round(quantile(values, 0.95), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def measure(*, admin_dsn: str, runs: int, interval: str, workdir: Path) -> dict[str, Any]:
    factory = DatabaseFactory(admin_dsn, tag=NAME)
    dsn: str | None = None
    try:
        dsn = _with_audit(factory)
        with Database(dsn, min_size=1, max_size=4) as db:
            result = _measure(db, dsn, runs=runs, interval=interval, workdir=workdir)
        # Made here and dropped below, named so a caller can check nothing is left.
        result["databases"] = [factory.template, *factory.created]
        return result
    finally:
        if dsn is not None:
            factory.drop(dsn)
        factory.close()


def _with_audit(factory: DatabaseFactory) -> str:
    """A fresh database with the test jobs' audit table (the Record job writes to it)."""
    dsn = factory.create()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(testjobs.AUDIT_DDL)
    return dsn


def _measure(db: Database, dsn: str, *, runs: int, interval: str, workdir: Path
             ) -> dict[str, Any]:
    reports = io.StringIO()
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(started_plane(tools.kube_tools(), workdir / "plane"))
        # open_cluster prints every pod's log at exit: kept out of the bench's output.
        stack.enter_context(contextlib.redirect_stdout(reports))
        cluster = stack.enter_context(open_cluster(
            plane, namespace=NAME, dsn=dsn, client=Client(database=db), workdir=workdir))
        cluster.install()
        site = cluster.site()
        site.api.create(scenarios.schedule(site, NAME, "tests.support.testjobs:Record",
                                           interval=interval,
                                           successfulJobsHistoryLimit=runs + 20))
        seen: dict[str, dict[str, Any]] = {}

        def collected() -> bool:
            for pod in scenarios.run_pods(site, NAME):
                name = pod["metadata"]["name"]
                began = started_at(pod)
                if name in seen or began is None:
                    continue
                process = cluster.kubelet.pods.get(name)
                if process is None:
                    continue
                claimed = float(pod["metadata"]["annotations"][
                    runpods.CLAIMED_AT_ANNOTATION])
                spawned = time.time() - (time.monotonic() - process.started_at)
                seen[name] = {"pod": name, "job_id": int(pod["metadata"]["labels"][
                    runpods.JOB_ID_LABEL]), "claimed_at": claimed, "started_at": began,
                    "spawned_at": round(spawned, 3)}
            return len(seen) >= runs

        deadline = runs * max(1.0, float(interval.rstrip("s"))) * 4 + 180
        site.wait(collected, timeout=deadline, what=f"{runs} pod runs started")
        ran: dict[int, float] = {}

        def every_job_ran() -> bool:
            ran.update(_audit_times(dsn))
            return all(r["job_id"] in ran for r in seen.values())

        site.wait(every_job_ran, timeout=120, what="every measured job ran")
        site.wait(lambda: _count(cluster.operator_ports()) >= runs, timeout=60,
                  what="the operator observed every start")
        text = "".join(_scrape(port) for port in cluster.operator_ports())
    rows = sorted(seen.values(), key=lambda r: r["claimed_at"])[:runs]
    for row in rows:
        row["observed"] = round(max(0.0, row["started_at"] - row["claimed_at"]), 3)
        row["spawned"] = round(row["spawned_at"] - row["claimed_at"], 3)
        row["job_ran"] = round(ran[row["job_id"]] - row["claimed_at"], 3)
    buckets = histogram(text, METRIC, kind="JobSchedule")
    return {
        "metric": {"name": METRIC, "count": buckets[-1][1] if buckets else 0,
                   "buckets": [[str(le), c] for le, c in buckets],
                   "p50": _rounded(histogram_quantile(0.5, buckets)),
                   "p95": _rounded(histogram_quantile(0.95, buckets))},
        "observed": summary([r["observed"] for r in rows]),
        "spawned": summary([r["spawned"] for r in rows]),
        "job_ran": summary([r["job_ran"] for r in rows]),
        "pods": rows,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _audit_times(dsn: str) -> dict[int, float]:
    """When each job's code ran (its ``ran`` audit row), in epoch seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT job_id, extract(epoch FROM at)::float8 FROM public.audit "
                             "WHERE event = 'ran'").fetchall()
    return {int(job): float(at) for job, at in found}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def _count(ports: Sequence[int]) -> float:
    return sum((histogram(_scrape(p), METRIC, kind="JobSchedule") or [(0.0, 0.0)])[-1][1]
               for p in ports)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.podstart", description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="pod runs measured")
    parser.add_argument("--interval", default="3s", help="the JobSchedule's interval")
    parser.add_argument("--dsn", default=os.environ.get(
        "JOBWARDEN_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="an admin DSN: a fresh database is made there and dropped at the end")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2")
    why = tools.plane_unavailable()
    if why is not None:
        print(f"bench.podstart: {why}", file=sys.stderr)
        return 3
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jw-podstart-") as tmp:
        result = measure(admin_dsn=args.dsn, runs=args.runs, interval=args.interval,
                         workdir=Path(tmp))
    record = {"bench": "podstart", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "runs": args.runs, "interval": args.interval,
              "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                          "loadavg_after": os.getloadavg(), "nice": os.nice(0)},
              "wall_seconds": round(time.monotonic() - started, 1), **result}
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    metric = record["metric"]
    print(f"pod start (claim -> container running), {args.runs} runs every {args.interval}, "
          f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}:")
    print(f"  exported histogram ({METRIC}, histogram_quantile): "
          f"p50 {metric['p50']} s, p95 {metric['p95']} s (count {metric['count']:.0f})")
    for key, label in (("observed", "its observations (startedAt whole seconds)"),
                       ("spawned", "claim -> kubelet started the process"),
                       ("job_ran", "claim -> the job's code ran in the pod")):
        values = record[key]
        print(f"  {label}: p50 {values['p50']} s, p95 {values['p95']} s "
              f"(min {values['min']}, max {values['max']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
