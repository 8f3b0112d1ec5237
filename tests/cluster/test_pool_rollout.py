"""A WorkerPool on the real control plane under load: an image change drains
every old pod before it is deleted and loses nothing; deleting the pool lets the
garbage collector delete its pods, each worker finishing its job on SIGTERM,
and nothing of it remains (finalizer, owner references, GC).

The kubelet records, for each deletion it saw, what the host registry said at
that moment: a pod the operator removed must have been draining (or already
unregistered) and idle, and must have exited on SIGTERM without a SIGKILL.
"""

from __future__ import annotations

import collections
from typing import Any

import psycopg
import pytest

from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import RealCluster, secret, worker_pool
from tests.conftest import audit_rows
from tests.e2e.conftest import Load

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

LABEL = f"{pools_spec.POOL_LABEL}=workers"


def statuses(dsn: str, ids: list[int]) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT status::text, count(*) FROM jobwarden.jobs "
                            "WHERE id = ANY(%s) GROUP BY 1", (ids,)).fetchall()
    return {status: count for status, count in rows}


def pod_names(realkube: RealCluster) -> set[str]:
    return {p["metadata"]["name"] for p in realkube.pods(LABEL)}


def settled(realkube: RealCluster, *, replicas: int, version: str) -> bool:
    pool = realkube.api.get("workerpools", "workers", realkube.namespace) or {}
    status = pool.get("status") or {}
    progressing = next((c for c in status.get("conditions") or []
                        if c.get("type") == "Progressing"), {})
    return (progressing.get("reason") == "Complete" and status.get("readyReplicas") == replicas
            and status.get("updatedReplicas") == replicas
            and status.get("codeVersion") == version
            and len(realkube.pods(LABEL, alive=False)) == replicas)


def assert_drained_before_deleted(realkube: RealCluster, pods: set[str]) -> None:
    for pod in sorted(pods):
        realkube.wait(lambda pod=pod: realkube.api.get("pods", pod, realkube.namespace) is None,
                      timeout=90, what=f"pod {pod} gone")
        record = realkube.kubelet.deletion(pod)
        assert record is not None, f"pod {pod} was never deleted"
        assert pools_spec.DRAIN_STARTED_ANNOTATION in record.annotations, (pod, record)
        observed: dict[str, Any] = record.observed
        assert observed["running"] == 0, (pod, observed)
        assert observed["draining"] or not observed["registered"], (pod, observed)
        assert not record.killed, f"pod {pod} needed SIGKILL"


def test_an_image_change_under_load_drains_every_old_pod_and_deletion_cleans_up(
        realkube: RealCluster):
    realkube.install()
    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    realkube.kubectl.apply(worker_pool("workers", realkube.namespace, "db", replicas=2,
                                       image="example/jobs:1",
                                       rollout={"maxSurge": 1, "maxUnavailable": 0}))
    realkube.wait(lambda: settled(realkube, replicas=2, version="1"), timeout=150,
                  what="two ready workers")
    old = pod_names(realkube)
    for pod in realkube.pods(LABEL):
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner.get("controller")) == (
            "WorkerPool", "workers", True)

    with Load(realkube.client, long_seconds=2.0) as load:
        realkube.wait(lambda: statuses(realkube.dsn, load.ids["short"]).get("completed", 0)
                      >= 10, timeout=60, what="load flowing")
        realkube.kubectl("patch", "wp", "workers", "-n", realkube.namespace, "--type=merge",
                         "-p", '{"spec": {"image": "example/jobs:2"}}')
        realkube.wait(lambda: settled(realkube, replicas=2, version="2")
                      and not (old & pod_names(realkube)), timeout=180,
                      what="the rollout to complete")
    assert not load.errors
    # One Event each for the rollout (issue 27: RolloutStarted was posted twice).
    def told() -> collections.Counter[str]:
        counted: collections.Counter[str] = collections.Counter()
        for event in realkube.api.events(realkube.namespace, involved="workers"):
            counted[str(event.get("reason"))] += int(event.get("count") or 1)
        return counted

    realkube.wait(lambda: told()["RolloutComplete"], timeout=30, what="RolloutComplete")
    assert (told()["RolloutStarted"], told()["RolloutComplete"]) == (1, 1), told()
    assert_drained_before_deleted(realkube, old)
    ids = load.all_ids()
    realkube.wait(lambda: statuses(realkube.dsn, ids).get("completed", 0) == len(ids),
                  timeout=120, what=f"all {len(ids)} jobs completed")
    once = set(load.ids["long_once"])
    starts = [row[0] for row in audit_rows(realkube.dsn, "start") if row[0] in once]
    assert sorted(starts) == sorted(once), "a non-idempotent job started twice (or never)"

    # Deleting the pool (docs/workerpools.md): the operator's finalizer goes once its timer
    # stopped, the garbage collector deletes the pods through their owner references, and
    # each worker drains itself on SIGTERM -- nothing is SIGKILLed, nothing is left.
    new = pod_names(realkube)
    job = realkube.client.enqueue("tests.support.testjobs:Sleepy", {"seconds": 5.0})
    realkube.wait(lambda: realkube.client.job(job.id).status is JobStatus.PROCESSING, timeout=30,
                  what="a job running on the pool")
    realkube.kubectl("delete", "wp", "workers", "-n", realkube.namespace, "--timeout=120s")
    assert realkube.api.get("workerpools", "workers", realkube.namespace) is None
    realkube.wait(lambda: realkube.pods(LABEL, alive=False) == [], timeout=120,
                  what="the garbage collector to delete the pool's pods")
    for pod in sorted(new):
        record = realkube.wait(lambda pod=pod: realkube.kubelet.deletion(pod), timeout=30,
                               what=f"the deletion of {pod}")
        realkube.wait(lambda record=record: record.exited_at is not None, timeout=60,
                      what=f"{pod} to exit")
        assert not record.killed and record.exit_code == 0, (pod, record)
    assert realkube.client.job(job.id).status is JobStatus.COMPLETED
