"""Several operators on one database: two replicas under kopf peering on one control
plane, and two control planes ("two clusters") each with its own operator.

What must hold either way (docs/operator.md, "Several replicas, several
clusters"): a JobSchedule applied everywhere is one schedule with one job per
slot; each operator loop's database lease (``operator:<loop>``) has one holder
at a time, and only the holder of the gauge lease (``jobwarden:gauges``, shared
with the workers) exports the database-wide gauges. With kopf peering, one
replica handles the resources and the other stands by.
"""

from __future__ import annotations

import collections
import contextlib
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.maintenance import gauges
from tests.cluster.conftest import RealCluster, open_cluster, secret, worker_pool
from tests.cluster.controlplane import ControlPlane

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

SCHEDULE = {"interval": "1s", "job": {"class": "tests.support.testjobs:Record"},
            "workerPool": "workers"}
#: The leases only operators hold, one per loop; and the gauge lease (workers too).
LOOPS = ("operator:schedules", "operator:reaper")
GAUGES = gauges.LEASE_NAME


def operators(cluster: RealCluster) -> list[Any]:
    return [p for p in cluster.kubelet.pods.values()
            if p.container == "operator" and not p.removed]


def peering_state(log: str) -> str:
    """``paused`` or ``active``: what kopf's last peering message in ``log`` says. kopf
    starts paused (mandatory peering) and logs the resume, not the initial pause."""
    state = "paused"
    for line in log.splitlines():
        if "Pausing operations in favour of" in line or "Pausing all operators" in line:
            state = "paused"
        elif "Resuming operations after the pause" in line:
            state = "active"
    return state


def serving(*clusters: RealCluster) -> list[Any]:
    """Every live pod with a metrics port (operators and workers)."""
    return [p for c in clusters for p in c.kubelet.pods.values()
            if p.port is not None and not p.removed and p.proc.poll() is None]


def exports_gauges(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return any(line.startswith("jobwarden_queue_depth{") for line in text.splitlines())


def loop_holders(dsn: str) -> dict[str, str]:
    """Each held loop lease (operator loops, gauges) and the host (pod) holding it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, holder_host FROM jobwarden.leases WHERE name = ANY(%s) "
            "AND owner IS NOT NULL AND expires_at > now()", ([*LOOPS, GAUGES],)).fetchall()
    return {str(name): str(host) for name, host in rows}


def schedule(cluster: RealCluster, name: str) -> None:
    cluster.kubectl.apply({"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
                           "metadata": {"name": name, "namespace": cluster.namespace},
                           "spec": SCHEDULE})


def one_job_per_slot(cluster: RealCluster, row: str, *, slots: int = 4) -> None:
    def completed() -> list[Any]:
        jobs = [j for j in cluster.client.jobs(limit=1000, status="completed")
                if j.schedule_name == row]
        return jobs if len(jobs) >= slots else []

    cluster.wait(completed, timeout=120, what=f"{slots} completed slots of {row}")
    jobs = [j for j in cluster.client.jobs(limit=1000) if j.schedule_name == row]
    per_slot = collections.Counter(j.unique_key for j in jobs)
    assert max(per_slot.values()) == 1, per_slot


def steady_holders(cluster: RealCluster, hosts: set[str], *, polls: int = 10
                   ) -> dict[str, str]:
    """Every operator loop lease held by one of ``hosts`` (the operators), and by the same
    one on every poll (leases held by two operators at once, or flapping, would show)."""
    first = cluster.wait(lambda: (lambda held: held if set(LOOPS) <= held.keys() else None)(
        loop_holders(cluster.dsn)), timeout=60, what="every loop lease held")
    assert set(first.values()) <= hosts, (first, hosts)
    for _ in range(polls):
        now = loop_holders(cluster.dsn)
        assert {k: now.get(k) for k in LOOPS} == {k: first[k] for k in LOOPS}, (first, now)
        time.sleep(0.3)  # sampling an invariant over time, not waiting for a state
    return first


@pytest.mark.timeout(900)  # 250-260 s on a machine with ~40% of its CPU stolen
def test_two_peered_replicas_one_handles_resources_and_each_loop_has_one_holder(
        realkube: RealCluster):
    values = realkube.base_values(operator={
        **realkube.base_values()["operator"], "replicas": 2, "peering": {"enabled": True,
                                                                       "name": "jobwarden"}})
    realkube.install(values=values)
    realkube.wait(lambda: len(operators(realkube)) == 2, timeout=60, what="two operators")
    # The peering object lists both replicas (kopf keeps its peers in its status).
    realkube.wait(lambda: len((realkube.api.get("kopfpeerings", "jobwarden",
                                                 realkube.namespace) or {})
                               .get("status") or {}) >= 2,
                  timeout=60, what="both replicas in the KopfPeering's status")
    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    realkube.api.create(worker_pool("workers", realkube.namespace, "db"))
    realkube.wait(lambda: ((realkube.api.get("workerpools", "workers", realkube.namespace)
                            or {}).get("status") or {}).get("readyReplicas") == 1,
                  timeout=120, what="a ready worker")
    schedule(realkube, "every-second")
    one_job_per_slot(realkube, f"{realkube.namespace}/every-second")

    pods = operators(realkube)
    assert len(pods) == 2
    # One replica stands by: kopf pauses it in favour of the higher priority peer (once
    # it has seen that peer in the KopfPeering; until then both may act -- the database
    # keeps that safe, as the slots above show).

    def paused() -> list[str] | None:
        found = [p.name for p in pods if peering_state(p.logs()) == "paused"]
        return found if len(found) == 1 else None

    try:
        realkube.wait(paused, timeout=90, what="exactly one paused replica")
    except AssertionError:
        peering = realkube.api.get("kopfpeerings", "jobwarden", realkube.namespace) or {}
        raise AssertionError((peering.get("status"), [
            [line for line in p.logs().splitlines() if "peering" in line][-10:]
            for p in pods])) from None
    # One worker pod, though two operators saw the pool.
    assert len(realkube.pods("jobwarden.io/pool=workers")) == 1

    steady_holders(realkube, {p.name for p in pods})
    one_gauge_exporter(realkube)


def one_gauge_exporter(*clusters: RealCluster) -> None:
    """Of every operator and worker, only the gauge lease's holder exports the gauges."""

    def exporters() -> list[str] | None:
        holder = loop_holders(clusters[0].dsn).get(GAUGES)
        found = [p.name for p in serving(*clusters) if exports_gauges(p.port)]
        return found if holder is not None and found == [holder] else None

    clusters[0].wait(exporters, timeout=60, what="one gauge exporter, the lease holder")


@pytest.mark.timeout(900)  # 250-260 s on a machine with ~40% of its CPU stolen
def test_two_clusters_on_one_database_share_one_schedule_and_each_loop_lease(
        realkube: RealCluster, second_plane: ControlPlane, client: Client, tmp_path: Path):
    with contextlib.ExitStack() as stack:
        other = stack.enter_context(open_cluster(
            second_plane, namespace=realkube.namespace, dsn=realkube.dsn, client=client,
            workdir=tmp_path / "cluster-b"))
        for cluster, name in ((realkube, "a"), (other, "b")):
            values = cluster.base_values(operator={**cluster.base_values()["operator"],
                                                   "clusterName": name})
            cluster.install(f"jw-{name}-{uuid.uuid4().hex[:4]}", values=values)
            cluster.api.create(secret("db", cluster.namespace, cluster.dsn))
            cluster.api.create(worker_pool("workers", cluster.namespace, "db"))
        for cluster in (realkube, other):
            cluster.wait(lambda c=cluster: ((c.api.get("workerpools", "workers", c.namespace)
                                             or {}).get("status") or {})
                         .get("readyReplicas") == 1, timeout=120, what="a ready worker")
        # The same JobSchedule in both clusters: one schedule, one job per slot.
        schedule(realkube, "every-second")
        schedule(other, "every-second")
        one_job_per_slot(realkube, f"{realkube.namespace}/every-second")

        ours, theirs = operators(realkube), operators(other)
        assert len(ours) == 1 and len(theirs) == 1
        steady_holders(realkube, {ours[0].name, theirs[0].name})
        one_gauge_exporter(realkube, other)
        # Both clusters' resources mirror the one schedule's row.

        def mirrored(cluster: RealCluster) -> bool:
            obj = cluster.api.get("jobschedules", "every-second", cluster.namespace) or {}
            status = obj.get("status") or {}
            return bool((status.get("lastJob") or {}).get("status") == "completed"
                        and (status.get("counts") or {}).get("enqueued", 0) >= 1)

        for cluster in (realkube, other):
            cluster.wait(lambda c=cluster: mirrored(c), timeout=60,
                         what="the schedule's status in both clusters")


@pytest.mark.timeout(900)  # 250-260 s on a machine with ~40% of its CPU stolen
def test_a_cluster_torn_down_leaves_the_shared_schedule_to_the_other(
        realkube: RealCluster, second_plane: ControlPlane, client: Client, tmp_path: Path):
    """Issue 27: runners hold the rows of a cluster whose operator stopped confirming them.
    A schedule applied in two clusters is one row, written by one of them: when that
    cluster's release is uninstalled, the other cluster's operator (its resource says the
    same) resumes the row once it is held and answers for it, and the slots go on, one
    job each."""
    grace = {"name": "JOBWARDEN_OWNER_GRACE_SECONDS", "value": "8"}
    with contextlib.ExitStack() as stack:
        other = stack.enter_context(open_cluster(
            second_plane, namespace=realkube.namespace, dsn=realkube.dsn, client=client,
            workdir=tmp_path / "cluster-b"))
        releases: dict[str, tuple[RealCluster, str]] = {}
        for cluster, name in ((realkube, "a"), (other, "b")):
            base = cluster.base_values()["operator"]
            values = cluster.base_values(operator={
                **base, "clusterName": name, "extraEnv": [*base["extraEnv"], grace]})
            releases[f"kubernetes:{name}"] = (
                cluster, cluster.install(f"jw-{name}-{uuid.uuid4().hex[:4]}", values=values))
        schedule(realkube, "shared")
        schedule(other, "shared")
        row = f"{realkube.namespace}/shared"
        writer = realkube.wait(lambda: (r := client.schedules.get(row)) is not None
                               and r.source, timeout=60, what="the shared row")
        survivor = next(s for s in releases if s != writer)
        owner, release = releases[writer]
        owner.releases.remove(release)
        owner.helm("uninstall", release, "--namespace", owner.namespace, "--wait",
                   "--timeout", "60s", timeout=120)
        adopted = realkube.wait(lambda: (r := client.schedules.get(row)) is not None
                                and r.source == survivor and not r.suspended and r,
                                timeout=120, what=f"the row answered for by {survivor}")
        assert adopted.spec_hash
        before = len([j for j in client.jobs(limit=5000) if j.schedule_name == row])
        realkube.wait(lambda: len([j for j in client.jobs(limit=5000)
                                   if j.schedule_name == row]) >= before + 3,
                      timeout=60, what="three more slots enqueued")
        per_slot = collections.Counter(j.unique_key for j in client.jobs(limit=5000)
                                       if j.schedule_name == row)
        assert max(per_slot.values()) == 1, per_slot
