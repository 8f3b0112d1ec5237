"""Run pods disrupted for real on the real control plane: evicted by the node's kubelet
(local storage over the pod's limit) and lost with their node (heartbeats stop; the real
node lifecycle and taint eviction controllers act). The operator ends each claim by the
dead worker's rules -- idempotent -> retried, non-idempotent -> interrupted, never run
twice -- with the cause in the job's error and an Event on the resource."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobwarden.api.client import Client
from jobwarden.structs.states import JobStatus
from tests.cluster.api import ApiError
from tests.cluster.conftest import RealCluster, open_cluster, secret, started_plane
from tests.cluster.controlplane import NODE_LOSS_CONTROLLERS, ControlPlane
from tests.conftest import audit_rows
from tests.e2e.kubelet import ProcessKubelet

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def exclusive(name: str, namespace: str, *, job: str, data: dict[str, Any],
              container: dict[str, Any] | None = None, **pod: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": job, "data": data, "maxRetries": 1},
                     "dsnSecretRef": {"name": "db"},
                     "podTemplate": {"spec": {**pod, "containers": [{
                         "name": "job", "image": "example/jobs:1",
                         "env": [{"name": "JOBWARDEN_HEARTBEAT_INTERVAL", "value": "0.5"}],
                         **(container or {})}]}}}}


def job_of(cluster: RealCluster, name: str) -> Any:
    obj = cluster.api.get("exclusivejobs", name, cluster.namespace) or {}
    raw = (obj.get("status") or {}).get("jobId")
    return cluster.client.job(int(raw)) if raw else None


def reasons(cluster: RealCluster, involved: str) -> set[str]:
    return {str(e.get("reason")) for e in cluster.api.list("events", cluster.namespace)
            if (e.get("involvedObject") or {}).get("name", "").startswith(involved)}


@pytest.mark.parametrize(("job", "after"), [
    ("tests.support.podrunjobs:Filler", JobStatus.COMPLETED),
    ("tests.support.podrunjobs:FillerOnce", JobStatus.INTERRUPTED),
], ids=["idempotent-retried", "non-idempotent-interrupted"])
def test_a_pod_the_kubelet_evicts_for_its_local_storage_ends_by_the_dead_worker_rules(
        realkube: RealCluster, job: str, after: JobStatus) -> None:
    realkube.install()
    namespace = realkube.namespace
    realkube.api.create(secret("db", namespace, realkube.dsn))
    # The job writes 8 MiB into /tmp (the operator's emptyDir; TMPDIR names it) against a
    # 2 MiB ephemeral-storage limit.
    realkube.kubectl.apply(exclusive("filler", namespace, job=job, data={"mb": 8}, container={
        "env": [{"name": "TMPDIR", "value": "/tmp"},
                {"name": "JOBWARDEN_HEARTBEAT_INTERVAL", "value": "0.5"}],
        "resources": {"limits": {"ephemeral-storage": "2Mi"}}}))
    done = realkube.wait(lambda: (j := job_of(realkube, "filler")) is not None
                         and j.status is after and j, timeout=240,
                         what=f"the evicted run's job {after.value}")
    attempts = realkube.client.attempts(done.id)
    first = attempts[0]
    assert first.error is not None and first.error.startswith("pod evicted:"), first.error
    assert "ephemeral local storage usage exceeds the total limit" in first.error
    starts = [r for r in audit_rows(realkube.dsn, "start") if r[0] == done.id]
    if after is JobStatus.COMPLETED:
        assert done.attempts == 2 and [r[1] for r in starts] == [1, 2]  # retried once
    else:
        assert done.attempts == 1 and len(starts) == 1  # never run again
    assert not [r for r in audit_rows(realkube.dsn, "end") if r[0] == done.id and r[1] == 1]
    realkube.wait(lambda: "PodEvicted" in reasons(realkube, "filler"), timeout=30,
                  what="the operator's PodEvicted event")
    assert "Evicted" in reasons(realkube, f"filler-j{done.id}-1")  # the kubelet's, on the pod
    evicted = realkube.api.get("pods", f"filler-j{done.id}-1", namespace)
    if evicted is not None:  # kept by failedJobsHistoryLimit (1) unless a newer one failed
        assert evicted["status"]["phase"] == "Failed"
        assert evicted["status"]["reason"] == "Evicted"
        assert any(c["type"] == "DisruptionTarget" and c["reason"] == "TerminationByKubelet"
                   for c in evicted["status"]["conditions"])


@pytest.mark.parametrize(("job", "seconds", "after"), [
    ("tests.support.testjobs:Sleepy", 4, JobStatus.COMPLETED),
    ("tests.support.podrunjobs:FirstSlowOnce", 300, JobStatus.INTERRUPTED),
], ids=["finishes-within-its-grace", "non-idempotent-stopped-interrupted"])
def test_a_run_pod_evicted_through_the_eviction_api_keeps_what_its_process_recorded(
        realkube: RealCluster, job: str, seconds: int, after: JobStatus) -> None:
    """The Eviction API (policy/v1) on the real API server: the pod gets a DisruptionTarget
    condition and a graceful deletion, its process SIGTERM. run-job may finish the job
    within its stop grace (recorded completed, not overwritten by the operator) or records
    the stop itself (non-idempotent: interrupted); the operator posts PodEvicted either way."""
    realkube.install()
    namespace = realkube.namespace
    realkube.api.create(secret("db", namespace, realkube.dsn))
    grace = "15" if after is JobStatus.COMPLETED else "2"
    realkube.kubectl.apply(exclusive("evictee", namespace, job=job, data={"seconds": seconds},
                                     container={"env": [
                                         {"name": "JOBWARDEN_STOP_GRACE", "value": grace},
                                         {"name": "JOBWARDEN_HEARTBEAT_INTERVAL",
                                          "value": "0.5"}]},
                                     terminationGracePeriodSeconds=30))
    first = realkube.wait(lambda: (j := job_of(realkube, "evictee")) is not None
                          and any(r[0] == j.id for r in audit_rows(realkube.dsn, "start"))
                          and j, timeout=180, what="the job began in its pod")
    pod = f"evictee-j{first.id}-1"
    realkube.api.post("pods", pod, {"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": pod, "namespace": namespace}},
                      namespace, subresource="eviction")
    done = realkube.wait(lambda: (j := job_of(realkube, "evictee")) is not None
                         and j.status is after and j, timeout=120,
                         what=f"the evicted run's job {after.value}")
    starts = [r[1] for r in audit_rows(realkube.dsn, "start") if r[0] == done.id]
    assert done.attempts == 1 and starts == [1]  # one run, never started again
    if after is JobStatus.COMPLETED:
        assert [r[0] for r in audit_rows(realkube.dsn, "end")].count(done.id) == 1
    else:
        (attempt,) = realkube.client.attempts(done.id)
        assert attempt.error is not None and "SIGTERM" in attempt.error, attempt.error
    realkube.wait(lambda: "PodEvicted" in reasons(realkube, "evictee"), timeout=60,
                  what="the operator's PodEvicted event")
    assert realkube.api.get("pods", pod, namespace) is None  # the eviction deleted it


#: The node lifecycle controller's timings: a node whose heartbeats stopped 10 s ago is
#: Unknown and tainted (checked every second). Its own control plane: the shared one runs
#: no node lifecycle controller, because its other nodes do not heartbeat.
NODE_LOSS_FLAGS = ("--node-monitor-grace-period=10s", "--node-monitor-period=1s",
                   "--node-startup-grace-period=20s")
BATCH_TAINT = {"key": "jobwarden.test/batch", "value": "true", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def lifecycle_plane(kube_tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[ControlPlane]:
    with started_plane(kube_tools_dir, tmp_path_factory.mktemp("controlplane-nodes"),
                       controllers=NODE_LOSS_CONTROLLERS, manager_args=NODE_LOSS_FLAGS) as plane:
        yield plane


def batch_node(cluster: RealCluster, name: str) -> ProcessKubelet:
    """A node of the batch pool (label pool=batch, tainted): only run pods go there."""
    assert cluster.plane.pki is not None
    return ProcessKubelet(cluster.api, workdir=cluster.workdir / name,
                          namespace=cluster.namespace, node=name, server=cluster.plane.server,
                          ca_file=cluster.plane.pki.ca_cert,
                          extra_env={"JOBWARDEN_TEST_AUDIT_DSN": cluster.dsn}, interval=0.2,
                          labels={"pool": "batch"}, taints=[BATCH_TAINT], heartbeat=1.0).start()


#: The two runs on the node that is lost, as (ExclusiveJob, job, status after): both on
#: one node, lost once (each node-loss cycle waits out the controllers' grace).
LOST_RUNS = (("far-i", "tests.support.podrunjobs:FirstSlow", JobStatus.COMPLETED),
             ("far-n", "tests.support.podrunjobs:FirstSlowOnce", JobStatus.INTERRUPTED))


def test_runs_whose_node_is_lost_end_by_the_dead_worker_rules(
        lifecycle_plane: ControlPlane, dsn: str, client: Client, tmp_path: Path) -> None:
    """The operator's node heartbeats; two run pods (idempotent, non-idempotent) go to a
    batch node (nodeSelector and a toleration of its taint) that dies mid-run: heartbeats
    stop, processes killed. The node lifecycle controller marks it Unknown and taints it
    unreachable; the taint eviction controller deletes the pods (tolerationSeconds 2)
    with a DisruptionTarget condition; the operator judges node_lost. The idempotent run
    is retried on a replacement batch node; the non-idempotent one ends interrupted,
    never started again."""
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    lost: ProcessKubelet | None = None
    spare: ProcessKubelet | None = None
    with open_cluster(lifecycle_plane, namespace=namespace, dsn=dsn, client=client,
                      workdir=tmp_path, heartbeat=1.0) as cluster:
        try:
            cluster.install()
            cluster.api.create(secret("db", namespace, dsn))
            lost = batch_node(cluster, f"batch-a-{namespace}")
            unreachable = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists",
                            "effect": "NoExecute", "tolerationSeconds": 2}
                           for key in ("unreachable", "not-ready")]
            for name, job, _after in LOST_RUNS:
                cluster.kubectl.apply(exclusive(
                    name, namespace, job=job, data={"seconds": 300},
                    nodeSelector={"pool": "batch"},
                    tolerations=[{"key": BATCH_TAINT["key"], "operator": "Exists",
                                  "effect": "NoSchedule"}, *unreachable]))
            firsts = {name: cluster.wait(
                lambda name=name: (j := job_of(cluster, name)) is not None
                and any(r[0] == j.id for r in audit_rows(dsn, "start")) and j,
                timeout=180, what=f"{name}'s job began in a pod on the batch node")
                for name, _job, _after in LOST_RUNS}
            pods = {name: f"{name}-j{first.id}-1" for name, first in firsts.items()}
            for pod in pods.values():
                assert (cluster.api.get("pods", pod, namespace) or {})["spec"]["nodeName"] \
                    == lost.node
            lost.lose()
            spare = batch_node(cluster, f"batch-b-{namespace}")
            for name, _job, after in LOST_RUNS:
                done = cluster.wait(lambda name=name, after=after: (
                    j := job_of(cluster, name)) is not None and j.status is after and j,
                    timeout=180, what=f"{name}'s job {after.value} after its node was lost")
                attempts = cluster.client.attempts(done.id)
                assert attempts[0].error is not None
                assert attempts[0].error.startswith(f"pod node_lost: {pods[name]}:"), \
                    attempts[0].error
                starts = [r[1] for r in audit_rows(dsn, "start") if r[0] == done.id]
                if after is JobStatus.COMPLETED:
                    assert done.attempts == 2 and starts == [1, 2]
                    assert cluster.api.get("pods", f"{name}-j{done.id}-2", namespace)[
                        "spec"]["nodeName"] == spare.node  # the retry ran on the spare node
                else:
                    assert done.attempts == 1 and starts == [1]  # never started again
                cluster.wait(lambda name=name: "PodNodeLost" in reasons(
                    cluster, name), timeout=30, what=f"{name}'s PodNodeLost event")
                gone = cluster.api.get("pods", pods[name], namespace)
                if gone is not None:  # Terminating on a node that will never confirm it
                    assert any(c["type"] == "DisruptionTarget"
                               and c["reason"] == "DeletionByTaintManager"
                               for c in gone["status"]["conditions"])
            node = cluster.api.get("nodes", lost.node or "", None) or {}
            assert any(t["key"] == "node.kubernetes.io/unreachable"
                       for t in node.get("spec", {}).get("taints") or [])
        finally:
            for kubelet in (spare, lost):
                if kubelet is not None:
                    kubelet.stop()
                    with contextlib.suppress(ApiError):
                        cluster.api.delete("nodes", kubelet.node or "", None)
