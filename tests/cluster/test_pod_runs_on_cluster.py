"""Runs in pods of their own on the real control plane: docs/kubernetes.md's example applied.

The operator is installed by Helm and runs under exactly the chart's RBAC; the
JobSchedule of the docs (its namespace, job class and service account made the
test's) gets a run by the run-now annotation, the operator claims it and
creates the pod through the real API server (ServiceAccount, Pod Security and
ownerReference checks included), the process kubelet runs `jobwarden run-job`
in it, and the job completes under the pod's claim.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jobwarden.controller.podruns import pods as runpods
from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import RealCluster, secret
from tests.support import yamlio

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


def documented_pod_run() -> dict[str, Any]:
    for block in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S):
        for doc in yamlio.load_all(block):
            if isinstance(doc, dict) and "podTemplate" in (doc.get("spec") or {}):
                return doc
    raise AssertionError("docs/kubernetes.md shows no pod-run example")


def test_the_documented_pod_run_schedule_runs_its_job_in_a_pod_of_its_own(
        realkube: RealCluster) -> None:
    realkube.install()
    namespace = realkube.namespace
    example = documented_pod_run()
    example["metadata"]["namespace"] = namespace
    example["metadata"]["annotations"] = {"jobwarden.io/run-now": "first"}
    example["spec"]["job"] = {"class": "tests.support.testjobs:Record", "data": {"n": 1}}
    pod = example["spec"]["podTemplate"]["spec"]
    pod.pop("nodeSelector", None)  # the process kubelet's node has no such label
    # A label the operator also sets on pods it makes: the template's wins (issue 27).
    example["spec"]["podTemplate"]["metadata"]["labels"]["app.kubernetes.io/name"] = "export"
    realkube.api.create(secret(example["spec"]["dsnSecretRef"]["name"], namespace, realkube.dsn))
    realkube.api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": pod["serviceAccountName"],
                                      "namespace": namespace}})
    realkube.kubectl.apply(example)
    name = example["metadata"]["name"]

    def completed() -> Any:
        jobs = [j for j in realkube.client.jobs(limit=100)
                if j.pod_run == f"JobSchedule/{namespace}/{name}"]
        return jobs if jobs and all(j.status is JobStatus.COMPLETED for j in jobs) else None

    (job,) = realkube.wait(completed, timeout=180, what="the run-now job completed in its pod")
    pods = realkube.pods(labels=runpods.POD_RUN_LABEL)
    (run_pod,) = [p for p in pods
                  if p["metadata"]["labels"][runpods.JOB_ID_LABEL] == str(job.id)]
    assert job.claimed_by == run_pod["metadata"]["name"] == f"{name}-j{job.id}-1"
    labels = run_pod["metadata"]["labels"]
    assert (labels["team"], labels["app.kubernetes.io/name"]) == ("billing", "export")
    assert labels["app.kubernetes.io/instance"] == labels[runpods.OWNER_LABEL] == name
    assert run_pod["spec"]["serviceAccountName"] == pod["serviceAccountName"]
    assert run_pod["spec"]["automountServiceAccountToken"] is False
    assert run_pod["spec"]["restartPolicy"] == "Never"
    status = realkube.wait(lambda: ((realkube.api.get("jobschedules", name, namespace) or {})
                                    .get("status") or {}).get("lastPod") and True,
                           timeout=60, what="status.lastPod")
    assert status
    obj = realkube.api.get("jobschedules", name, namespace) or {}
    assert obj["status"]["lastPod"] == run_pod["metadata"]["name"]
    table = realkube.kubectl("get", "js", name, "-n", namespace, "-o", "wide")
    assert run_pod["metadata"]["name"] in table
