"""``python -m bench.clusters``: several clusters (control planes) on one database.

Each cluster is a real control plane of tests/cluster (etcd, API server, controller
manager) with its own process kubelet, and the operator installed by Helm with the
chart's defaults and its own ``clusterName``; all of them use one PostgreSQL database and
the same namespace. Clusters are added one at a time; after each, at rest (one JobSchedule
per cluster whose slots are a year apart, nothing due, nothing running), the database is
sampled for ``--rest`` seconds: transactions committed and rolled back per second
(``pg_stat_database`` of the database) and the connections to it (``pg_stat_activity``).
What each additional cluster costs is the difference.

Then, with every cluster up, what must hold (docs/operator.md, "Several replicas, several
clusters"), counted:

* one job per slot: the same pod-per-run JobSchedule (``interval: 2s``) applied in every
  cluster is one schedule row; each slot's job is claimed by one cluster's operator and
  its code runs once (tests/support/startclock.py records each start), whichever cluster
  ran its pod;
* one lease holder: every operator loop lease (``operator:schedules``,
  ``operator:reaper``) has one holder, an operator of one of the clusters, the same one
  on every poll;
* drains per cluster: each cluster runs a WorkerPool of the same name with one worker; a
  rollout of the first cluster's pool drains its own worker's host, and no other
  cluster's host is ever seen draining.

The load average is part of the record; nothing is asserted (tests/cluster specifies
behaviour). Exit 3 (one line) where the kube tools or openssl are missing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import io
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from bench.cronjob import bench_database
from jobwarden.api.client import Client
from jobwarden.db.database import Database
from tests.cluster import tools
from tests.cluster.conftest import RealCluster, open_cluster, secret, started_plane, worker_pool
from tests.e2e import podrunscenarios as scenarios

NAMESPACE = "shared"
LOOPS = ("operator:schedules", "operator:reaper")


def idle_schedule(namespace: str) -> dict[str, Any]:
    """A pod-per-run JobSchedule that is never due while measured (its slot: 1 January)."""
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": "yearly", "namespace": namespace},
            "spec": {"schedule": "0 0 1 1 *", "job": {"class": "tests.support.testjobs:Noop"},
                     "podTemplate": scenarios.template(), "dsnSecretRef": {"name": "db"}}}


def busy_schedule(namespace: str) -> dict[str, Any]:
    template = scenarios.template(env=[{"name": "JOBWARDEN_APPS",
                                        "value": "tests.support.startclockjob"}])
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": "every-2s", "namespace": namespace},
            "spec": {"interval": "2s", "job": {"class": "tests.support.startclockjob:StartClock"},
                     "podTemplate": template, "dsnSecretRef": {"name": "db"},
                     "successfulJobsHistoryLimit": 1000}}


def database_activity(dsn: str) -> tuple[float, dict[str, int]]:
    """Transactions so far (committed + rolled back) and connections by application."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
        apps = conn.execute(
            "SELECT coalesce(nullif(split_part(application_name, ':', 1), ''), '?'), count(*) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() GROUP BY 1").fetchall()
    assert row is not None
    return float(row[0]), {str(a): int(n) for a, n in apps}


def at_rest(dsn: str, seconds: float) -> dict[str, Any]:
    """The database's transactions/s and connections over ``seconds`` (this bench's own
    two sampling transactions taken out)."""
    first, _ = database_activity(dsn)
    started = time.monotonic()
    time.sleep(seconds)
    last, connections = database_activity(dsn)
    elapsed = time.monotonic() - started
    return {"transactions_per_s": round((last - first - 1) / elapsed, 2),
            "connections": sum(connections.values()), "by_application": connections}


def loop_holders(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT name, holder_host FROM jobwarden.leases WHERE name = ANY(%s) "
                            "AND owner IS NOT NULL AND expires_at > now()",
                            (list(LOOPS),)).fetchall()
    return {str(name): str(host) for name, host in rows}


def draining_hosts(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute(
            "SELECT name FROM jobwarden.hosts WHERE draining").fetchall()}


def measure(dsn: str, *, count: int, rest: float, slots: int, workdir: Path) -> dict[str, Any]:
    reports = io.StringIO()
    result: dict[str, Any] = {"clusters": count, "rest_seconds": rest, "at_rest": []}
    kube_tools = tools.kube_tools()
    with Database(dsn, min_size=1, max_size=4) as db, contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(reports))
        result["at_rest"].append({"clusters": 0, **at_rest(dsn, rest)})
        clusters: list[RealCluster] = []
        for k in range(count):
            plane = stack.enter_context(started_plane(kube_tools, workdir / f"plane-{k}"))
            cluster = stack.enter_context(open_cluster(
                plane, namespace=NAMESPACE, dsn=dsn, client=Client(database=db),
                workdir=workdir / f"cluster-{k}"))
            values = cluster.base_values()
            values["operator"] = {**values["operator"], "extraEnv": [],
                                  "clusterName": f"c{k}"}
            cluster.install(f"jw-c{k}", values=values)
            cluster.api.create(secret("db", NAMESPACE, dsn))
            cluster.api.create(idle_schedule(NAMESPACE))
            clusters.append(cluster)
            cluster.wait(lambda: len(loop_holders(dsn)) == len(LOOPS),
                         timeout=120, what="every loop lease held")
            time.sleep(15)  # settle: the new operator's start-up is not "at rest"
            result["at_rest"].append({"clusters": k + 1, **at_rest(dsn, rest)})
            print(f"at rest: {result['at_rest'][-1]}", file=sys.stderr, flush=True)
        for key, phase in (("slots", lambda: _one_job_per_slot(clusters, dsn, slots)),
                           ("drains", lambda: _drains_per_cluster(clusters, dsn))):
            try:
                result[key] = phase()
            except AssertionError as exc:  # recorded; the figures measured so far stand
                result[key] = {"failed": str(exc)[:2000]}
            print(f"{key}: {result[key]}", file=sys.stderr, flush=True)
    rests = result["at_rest"]
    result["per_additional_cluster"] = [
        {"clusters": b["clusters"],
         "transactions_per_s": round(b["transactions_per_s"] - a["transactions_per_s"], 2),
         "connections": b["connections"] - a["connections"]}
        for a, b in itertools.pairwise(rests)]
    return result


def _one_job_per_slot(clusters: list[RealCluster], dsn: str, slots: int) -> dict[str, Any]:
    for cluster in clusters:
        cluster.api.create(busy_schedule(NAMESPACE))
    row = f"{NAMESPACE}/every-2s"
    holders: list[dict[str, str]] = []

    def enough() -> bool:
        holders.append(loop_holders(dsn))
        with psycopg.connect(dsn, autocommit=True) as conn:
            ran = conn.execute("SELECT count(DISTINCT job_id) FROM public.startclock"
                               ).fetchone()
        return bool(ran and ran[0] >= slots)

    try:
        clusters[0].wait(enough, timeout=120 + slots * 30, what=f"{slots} slots run")
    finally:  # a pod every 2 s in every cluster would load the rest of the run
        for cluster in clusters:
            cluster.api.delete("jobschedules", "every-2s", NAMESPACE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        jobs = conn.execute("SELECT id, unique_key FROM jobwarden.jobs WHERE schedule_name = %s",
                            (row,)).fetchall()
        starts = collections.Counter(int(r[0]) for r in conn.execute(
            "SELECT job_id FROM public.startclock").fetchall())
        rows = conn.execute("SELECT count(*) FROM jobwarden.schedules WHERE name = %s",
                            (row,)).fetchone()
    per_slot = collections.Counter(str(key) for _, key in jobs)
    ran_by = collections.Counter(
        k for k, cluster in enumerate(clusters) for name in list(cluster.kubelet.pods)
        if name.startswith("every-2s-"))
    operators = {p.name: k for k, c in enumerate(clusters) for p in c.kubelet.pods.values()
                 if p.container == "operator"}
    return {"schedule_rows": rows[0] if rows else None, "jobs": len(jobs),
            "max_jobs_per_slot": max(per_slot.values(), default=0),
            "max_starts_per_job": max(starts.values(), default=0),
            "pods_by_cluster": {f"c{k}": n for k, n in sorted(ran_by.items())},
            "loop_holders_seen": sorted({f"{loop}={operators.get(h, h)}"
                                         for held in holders for loop, h in held.items()}),
            "polls": len(holders)}


def _drains_per_cluster(clusters: list[RealCluster], dsn: str) -> dict[str, Any]:
    for cluster in clusters:
        cluster.api.create(worker_pool("workers", NAMESPACE, "db"))
    for cluster in clusters:
        cluster.wait(lambda c=cluster: ((c.api.get("workerpools", "workers", NAMESPACE) or {})
                                        .get("status") or {}).get("readyReplicas") == 1,
                     timeout=180, what="a ready worker")

    def workers(cluster: RealCluster) -> set[str]:
        return {p["metadata"]["name"] for p in cluster.pods("jobwarden.io/pool=workers")}

    before = [workers(c) for c in clusters]
    seen: set[str] = set()
    first = clusters[0]
    first.api.patch("workerpools", "workers", {"spec": {"env": [
        *worker_pool("workers", NAMESPACE, "db")["spec"]["env"],
        {"name": "ROLLOUT", "value": "2"}]}}, NAMESPACE)

    def rolled() -> bool:
        seen.update(draining_hosts(dsn))
        now = workers(first)
        return bool(now) and not (now & before[0]) and len(now) == 1

    first.wait(rolled, timeout=240, what="the first cluster's pool rolled out")
    others = set().union(*before[1:])
    return {"drained": sorted(seen), "drained_in_rolled_cluster": sorted(seen & before[0]),
            "drained_elsewhere": sorted(seen & others),
            "others_unchanged": [workers(c) == b for c, b in zip(clusters[1:], before[1:],
                                                                 strict=True)]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.clusters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=3, help="control planes (2-5)")
    parser.add_argument("--rest", type=float, default=60.0,
                        help="seconds the database is sampled at rest after each cluster")
    parser.add_argument("--slots", type=int, default=10,
                        help="completed slots of the shared schedule counted")
    parser.add_argument("--dsn", default=None,
                        help="an admin DSN (default: the tests' server, else an embedded one)")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args(argv)
    if not 2 <= args.clusters <= 5 or args.rest <= 0 or args.slots < 1:
        parser.error("--clusters must be 2-5, --rest more than 0, --slots at least 1")
    why = tools.plane_unavailable()
    if why is not None:
        print(f"bench.clusters: {why}", file=sys.stderr)
        return 3
    load_before = os.getloadavg()
    started = time.monotonic()
    with bench_database(args.dsn, "clusters") as dsn, \
            tempfile.TemporaryDirectory(prefix="jw-clusters-") as tmp:
        result = measure(dsn, count=args.clusters, rest=args.rest, slots=args.slots,
                         workdir=Path(tmp))
    record = {"bench": "clusters", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                          "loadavg_after": os.getloadavg()},
              "wall_seconds": round(time.monotonic() - started, 1), **result}
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"bench.clusters, {args.clusters} clusters, load {load_before[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}:")
    for key, value in result.items():
        print(f"  {key}: {json.dumps(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
