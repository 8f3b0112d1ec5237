"""Run pods disrupted for real on the real control plane: evicted by the node's kubelet
(local storage over the pod's limit) and lost with their node (heartbeats stop; the real
node lifecycle and taint eviction controllers act). The operator ends each claim by the
dead worker's rules -- idempotent -> retried, non-idempotent -> interrupted, never run
twice -- with the cause in the job's error and an Event on the resource."""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import RealCluster, secret
from tests.conftest import audit_rows

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
