"""Drain-first rollouts and scale-downs under load, a killed worker, a restarted operator.

The guarantees each test checks, from the database and the kubelet's records:

* every pod the operator removed was drained first: the kubelet saw its
  deletion only when the host was draining (or gone) and ran nothing, and never
  had to SIGKILL it;
* zero jobs lost: every enqueued job completed;
* zero non-idempotent jobs ran twice (one ``start`` audit row each);
* throughput never stopped: no long gap between completions.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import psycopg
import pytest

from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.e2e.conftest import NAMESPACE, Cluster, Load

pytestmark = pytest.mark.slow

#: Longest pause between two job completions allowed while the pool changes.
MAX_GAP_SECONDS = 10.0


def pod_names(cluster: Cluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods()}


def statuses(dsn: str, ids: list[int]) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT status::text, count(*) FROM jobwarden.jobs "
                            "WHERE id = ANY(%s) GROUP BY 1", (ids,)).fetchall()
    return {status: count for status, count in rows}


def completions(dsn: str, ids: list[int]) -> list[float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT extract(epoch FROM finished_at)::float8 FROM jobwarden.jobs "
                            "WHERE id = ANY(%s) AND finished_at IS NOT NULL ORDER BY 1",
                            (ids,)).fetchall()
    return [r[0] for r in rows]


def wait_all_completed(cluster: Cluster, ids: list[int], *, timeout: float = 90) -> None:
    def done() -> bool:
        found = statuses(cluster.dsn, ids)
        return found.get("completed", 0) == len(ids)

    try:
        cluster.wait(done, timeout=timeout, what=f"all {len(ids)} jobs completed")
    except AssertionError:
        raise AssertionError(f"jobs not all completed: {statuses(cluster.dsn, ids)}") from None


def completed_count(cluster: Cluster, ids: list[int]) -> int:
    return statuses(cluster.dsn, ids).get("completed", 0)


def assert_drained_before_deleted(cluster: Cluster, pods: set[str]) -> None:
    for pod in sorted(pods):
        cluster.api.wait_gone("pods", pod, NAMESPACE, timeout=60)
        record = cluster.kubelet.deletion(pod)
        assert record is not None, f"pod {pod} was never deleted"
        assert pools_spec.DRAIN_STARTED_ANNOTATION in record.annotations, (pod, record)
        observed: dict[str, Any] = record.observed
        assert observed["running"] == 0, (pod, observed)
        assert observed["draining"] or not observed["registered"], (pod, observed)
        assert not record.killed, f"pod {pod} needed SIGKILL"


def assert_no_loss(cluster: Cluster, load: Load) -> None:
    wait_all_completed(cluster, load.all_ids())
    once = load.ids["long_once"]
    starts = [row[0] for row in audit_rows(cluster.dsn, "start") if row[0] in set(once)]
    assert sorted(starts) == sorted(once), "a non-idempotent job started twice (or never)"


def assert_throughput_kept(cluster: Cluster, load: Load, start: float, end: float) -> None:
    times = [t for t in completions(cluster.dsn, load.ids["short"]) if start <= t <= end]
    assert times, "no job completed during the change"
    edges = [start, *times, end]
    gap = max(b - a for a, b in itertools.pairwise(edges))
    assert gap < MAX_GAP_SECONDS, f"no job completed for {gap:.1f} s"


def event_reasons(cluster: Cluster, pool: str = "workers") -> list[str]:
    return [e["reason"] for e in cluster.api.events(NAMESPACE, involved=pool)]


def start_pool(cluster: Cluster, *, replicas: int, image: str = "example/jobs:1",
               version: str = "1", **options: Any) -> set[str]:
    cluster.apply_pool("workers", replicas=replicas, image=image, **options)
    cluster.wait(lambda: cluster.settled(replicas=replicas, version=version), timeout=120,
                 what=f"{replicas} ready pods")
    return pod_names(cluster)


def test_a_rolling_update_under_load_drains_every_old_host_and_loses_nothing(
        cluster: Cluster):
    old = start_pool(cluster, replicas=2)
    with Load(cluster.client, long_seconds=2.0) as load:
        cluster.wait(lambda: completed_count(cluster, load.ids["short"]) >= 10, timeout=60,
                     what="load flowing")
        began = time.time()
        cluster.patch_pool("workers", {"image": "example/jobs:2"})
        cluster.wait(lambda: cluster.settled(replicas=2, version="2") and not
                     (old & pod_names(cluster)), timeout=150, what="the rollout to complete")
        ended = time.time()
        done = completed_count(cluster, load.ids["short"])
        cluster.wait(lambda: completed_count(cluster, load.ids["short"]) >= done + 5,
                     timeout=60, what="the new pods to work")
    assert not load.errors
    new = pod_names(cluster)
    assert not new & old
    hosts = {h.name: h for h in cluster.client.hosts.status(pool="workers")}
    assert {hosts[p].code_version for p in new} == {"2"}
    assert_drained_before_deleted(cluster, old)
    assert_no_loss(cluster, load)
    assert_throughput_kept(cluster, load, began, ended)
    # RolloutComplete follows the status that records it (posted after that write).
    cluster.wait(lambda: "RolloutComplete" in event_reasons(cluster), timeout=30,
                 what="the RolloutComplete Event")
    reasons = event_reasons(cluster)
    for reason in ("RolloutStarted", "Draining", "Deleted", "RolloutComplete"):
        assert reason in reasons, reasons
    assert (cluster.operator.metric("jobwarden_rollout_duration_seconds_count", pool="workers")
            or 0) >= 1


def test_scaling_down_under_load_drains_the_removed_hosts_first(cluster: Cluster):
    before = start_pool(cluster, replicas=3)
    with Load(cluster.client, long_seconds=2.0) as load:
        cluster.wait(lambda: completed_count(cluster, load.ids["short"]) >= 10, timeout=60,
                     what="load flowing")
        began = time.time()
        cluster.api.patch("workerpools", "workers", {"spec": {"replicas": 1}}, NAMESPACE)
        cluster.wait(lambda: cluster.settled(replicas=1, version="1"), timeout=120,
                     what="one pod left")
        ended = time.time()
    left = pod_names(cluster)
    assert len(left) == 1 and left <= before
    assert_drained_before_deleted(cluster, before - left)
    assert_no_loss(cluster, load)
    assert_throughput_kept(cluster, load, began, ended)
    status = cluster.pool()["status"]
    assert status["replicas"] == 1 and status["drainingHosts"] == []


def test_a_killed_worker_s_pod_is_replaced_and_its_jobs_reaped(cluster: Cluster):
    (victim,) = start_pool(cluster, replicas=1)
    retried = cluster.client.enqueue("tests.support.testjobs:Sleepy", {"seconds": 30}).id
    once = cluster.client.enqueue("tests.support.testjobs:SleepyOnce", {"seconds": 30}).id
    # Running means the job's code has begun (its "start" audit row), not merely
    # claimed: a kill between the claim and the first line of perform() would leave
    # the non-idempotent job interrupted without ever having started.
    cluster.wait(lambda: {r[0] for r in audit_rows(cluster.dsn, "start")} >= {retried, once},
                 timeout=60, what="both jobs running")
    assert {cluster.client.job(i).claimed_by for i in (retried, once)} == {victim}

    cluster.kubelet.kill(victim)
    cluster.api.wait_gone("pods", victim, NAMESPACE, timeout=60)
    cluster.wait(lambda: cluster.settled(replicas=1) and victim not in pod_names(cluster),
                 timeout=120, what="a replacement pod")
    (replacement,) = pod_names(cluster)
    cluster.wait(lambda: cluster.client.job(once).status is JobStatus.INTERRUPTED, timeout=60,
                 what="the non-idempotent job interrupted")
    cluster.wait(lambda: cluster.client.job(retried).status is JobStatus.PROCESSING
                 and cluster.client.job(retried).claimed_by == replacement, timeout=60,
                 what="the idempotent job retried on the replacement")
    assert cluster.client.job(retried).attempts == 2
    assert "PodFailed" in event_reasons(cluster)
    assert len([r for r in audit_rows(cluster.dsn, "start") if r[0] == once]) == 1


def test_an_operator_restarted_in_the_middle_of_a_rollout_completes_it(cluster: Cluster):
    old = start_pool(cluster, replicas=3)
    with Load(cluster.client, long_seconds=4.0, long_every=0.5) as load:
        cluster.wait(lambda: completed_count(cluster, load.ids["short"]) >= 10, timeout=60,
                     what="load flowing")
        cluster.patch_pool("workers", {"image": "example/jobs:2"})

        def midway() -> bool:
            pods = cluster.pods()
            draining = [p for p in pods if pools_spec.DRAIN_STARTED_ANNOTATION
                        in (p["metadata"].get("annotations") or {})]
            return bool(draining) and len(old & pod_names(cluster)) >= 2

        cluster.wait(midway, timeout=90, what="a rollout in progress")
        cluster.restart_operator()
        cluster.wait(lambda: cluster.settled(replicas=3, version="2") and not
                     (old & pod_names(cluster)), timeout=150, what="the rollout to complete")
    assert_drained_before_deleted(cluster, old)
    assert_no_loss(cluster, load)
    cluster.wait(lambda: "RolloutComplete" in event_reasons(cluster), timeout=30,
                 what="the RolloutComplete Event")


def test_a_drain_that_times_out_deletes_the_pod_and_counts_the_jobs_left_to_the_reaper(
        cluster: Cluster):
    (old,) = start_pool(cluster, replicas=1, drain=3)
    stuck = cluster.client.enqueue("tests.support.testjobs:SleepyOnce", {"seconds": 60}).id
    cluster.wait(lambda: cluster.client.job(stuck).status is JobStatus.PROCESSING, timeout=60,
                 what="the long job running")
    cluster.patch_pool("workers", {"image": "example/jobs:2"})
    cluster.wait(lambda: cluster.settled(replicas=1, version="2"), timeout=120,
                 what="the rollout to complete")
    record = cluster.kubelet.deletion(old)
    assert record is not None and record.observed["running"] == 1
    assert pools_spec.DRAIN_STARTED_ANNOTATION in record.annotations
    warnings = [e for e in cluster.api.events(NAMESPACE, involved="workers")
                if e["reason"] == "DrainTimeout"]
    assert warnings and "1 job(s)" in warnings[0]["message"]
    assert cluster.operator.metric("jobwarden_rollout_reaped_jobs_total", pool="workers") == 1
    cluster.wait(lambda: cluster.client.job(stuck).status is JobStatus.INTERRUPTED, timeout=60,
                 what="the reaper to interrupt the job left behind")
