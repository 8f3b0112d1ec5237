"""Pods of runs that never start or die, on the real control plane: the operator reads
the pod status a kubelet reports (tests/e2e/kubelet.py, node mode) and ends the claim
by the dead worker's rules with the cause in the job's error and an Event."""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import RealCluster, secret

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def exclusive(name: str, namespace: str, *, image: str, job: str, data: dict[str, Any],
              memory: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "job", "image": image}
    if memory:
        container["resources"] = {"limits": {"memory": memory}}
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": job, "data": data, "maxRetries": 0},
                     # The deadline counts from the claim (docs/kubernetes.md); at its end
                     # the cause is read from what the kubelet reported. 10 s was missed
                     # on a loaded CI machine by the pod's create call alone (14 s).
                     "startDeadlineSeconds": 45, "dsnSecretRef": {"name": "db"},
                     "podTemplate": {"spec": {"containers": [container]}}}}


@pytest.mark.parametrize(("case", "cause", "event"), [
    ("image", "image_pull", "PodImagePullFailed"),
    ("oom", "oom_killed", "PodOOMKilled"),
])
def test_a_pod_that_never_starts_or_is_oom_killed_is_reported_with_its_cause(
        realkube: RealCluster, case: str, cause: str, event: str) -> None:
    realkube.install()
    namespace = realkube.namespace
    realkube.api.create(secret("db", namespace, realkube.dsn))
    if case == "image":
        manifest = exclusive("never", namespace, image="registry.invalid/jobs:1",
                             job="tests.support.testjobs:Record", data={})
    else:
        manifest = exclusive("never", namespace, image="example/jobs:1", memory="64Mi",
                             job="tests.support.podrunjobs:Hog", data={"mb": 256})
    realkube.kubectl.apply(manifest)

    def ended() -> Any:
        obj = realkube.api.get("exclusivejobs", "never", namespace) or {}
        raw = (obj.get("status") or {}).get("jobId")
        job = realkube.client.job(int(raw)) if raw else None
        return job if job is not None and job.status is JobStatus.FAILED else None

    job = realkube.wait(ended, timeout=180, what=f"the job failed by {cause}")
    assert job.last_error is not None and f"pod {cause}" in job.last_error, job.last_error
    assert job.attempts == 1
    realkube.wait(lambda: event in {e.get("reason") for e in realkube.api.list(
        "events", namespace) if (e.get("involvedObject") or {}).get("name") == "never"},
        timeout=30, what=f"the {event} event")
    if case == "image":  # deleted at the deadline, so it cannot start late
        realkube.wait(lambda: not [p for p in realkube.pods()
                                   if p["metadata"]["name"].startswith("never-")],
                      timeout=60, what="the pod that never started deleted")
