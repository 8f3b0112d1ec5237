"""An ExclusiveJob through the real operator, the emulated API, PostgreSQL and a real worker."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator.conftest import OperatorProcess
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

EXCLUSIVE = """
apiVersion: jobwarden.io/v1alpha1
kind: ExclusiveJob
metadata: {name: reindex}
spec:
  job:
    class: tests.support.leasejobs:BusyOnce
    data: {index: products}
    timeoutSeconds: 10
  concurrencyKey: busy-key
  lease: {onBusy: defer}
"""


def phase(obj: dict[str, Any]) -> str | None:
    return obj.get("status", {}).get("phase")


def test_a_held_key_defers_the_job_and_its_release_lets_it_succeed(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess],
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    start_operator(kube_api)
    holder = client.lease("key:busy-key", ttl=30, owner="someone-else").acquire()
    spawn_worker("--app", "tests.support.leasejobs")
    kubectl.apply(EXCLUSIVE)

    deferred = kube_api.wait_for("xj", "reindex", condition=lambda o: phase(o) == "Deferred",
                                 timeout=20)
    status = deferred["status"]
    assert status["deferrals"] >= 1 and status["attempts"] == 0
    assert status["lease"]["token"] == holder.token  # the blocking holder, shown as is
    job = client.job(int(status["jobId"]))
    assert job.unique_key == f"exclusivejob:{deferred['metadata']['uid']}:1"
    assert job.lease_name == "key:busy-key"

    holder.release()
    done = kube_api.wait_for("xj", "reindex", condition=lambda o: phase(o) == "Succeeded",
                             timeout=20)["status"]
    assert done["attempts"] == 1 and done["result"] == "ran" and done["leaseLost"] is False
    assert done["lease"]["token"] > holder.token  # the job's own, later acquisition
    assert done["jobId"] == status["jobId"]  # one job for the resource, not one per pass
    ready = {c["type"]: c for c in done["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["observedGeneration"] == 1
    # Events are posted by kopf's poster, independently of the status patch.
    kube_api.wait(lambda: {"Deferred", "Succeeded"} <= {
        e["reason"] for e in kube_api.events("default", involved="reindex")}, what="events")
    assert [j.id for j in client.jobs(job_class="tests.support.leasejobs:BusyOnce")] == [job.id]


def test_deleting_an_exclusive_job_cancels_its_pending_job(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    start_operator(kube_api)
    kubectl.apply(EXCLUSIVE)
    pending = kube_api.wait_for("xj", "reindex", condition=lambda o: phase(o) == "Pending",
                                timeout=20)
    job_id = int(pending["status"]["jobId"])
    # No finalizer (nothing may hang once the operator is gone): the deletion is observed.
    assert not pending["metadata"].get("finalizers")
    kubectl("delete", "xj", "reindex")
    wait_for(lambda: client.job(job_id).status == "cancelled", timeout=20,
             message="the pending job cancelled after the deletion")


def test_a_new_generation_enqueues_a_new_job_and_cancels_the_unstarted_one(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    start_operator(kube_api)
    kubectl.apply(EXCLUSIVE)
    first = kube_api.wait_for("xj", "reindex", condition=lambda o: phase(o) == "Pending",
                              timeout=20)["status"]["jobId"]
    kubectl.apply(EXCLUSIVE.replace("index: products", "index: orders"))
    second = kube_api.wait_for(
        "xj", "reindex", timeout=20,
        condition=lambda o: o["status"].get("observedGeneration") == 2)["status"]["jobId"]
    assert second != first
    assert client.job(int(second)).data == {"index": "orders"}
    wait_for(lambda: client.job(int(first)).status == "cancelled", timeout=10,
             message="the superseded job cancelled")


def test_an_invalid_exclusive_job_is_not_ready_and_enqueues_nothing(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    # The real API server's enum would refuse this; the emulator does not validate, which
    # is exactly the case the operator must survive (an older CRD, a skipped validation).
    kubectl.apply(EXCLUSIVE.replace("onBusy: defer", "onBusy: sometimes"))
    obj = kube_api.wait_for("xj", "reindex", timeout=20,
                            condition=lambda o: bool(o.get("status", {}).get("conditions")))
    ready = obj["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert "spec.lease.onBusy" in ready["message"]
    assert "phase" not in obj["status"]
    assert client.jobs() == []
    events = kube_api.wait(lambda: kube_api.events("default", involved="reindex"))
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    assert operator.metric("jobwarden_operator_reconciles_total", kind="ExclusiveJob",
                           result="invalid")
