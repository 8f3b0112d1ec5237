"""The chart's life on a real control plane: the default WorkerPool of the
release runs workers, the documented CRD upgrade path and a values-changing
`helm upgrade` work, and `helm uninstall` then namespace deletion complete
(nothing is left hanging on a finalizer).
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from jobwarden.controller import pools_spec
from tests.cluster.conftest import CHART, RealCluster
from tests.e2e.conftest import WORKER_ENV

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def pool_status(realkube: RealCluster, name: str = "default") -> dict[str, Any]:
    pool = realkube.api.get("workerpools", name, realkube.namespace) or {}
    return pool.get("status") or {}


def ready_workers(realkube: RealCluster, count: int) -> bool:
    pods = realkube.pods(f"{pools_spec.POOL_LABEL}=default")
    ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in (p.get("status") or {}).get("conditions") or [])]
    return len(pods) == count and len(ready) == count \
        and pool_status(realkube).get("readyReplicas") == count


def default_pool_values(realkube: RealCluster) -> dict[str, Any]:
    return realkube.base_values(workerPool={
        "enabled": True, "replicas": 1, "apps": ["tests.support.testjobs"],
        "image": "example/jobs:1", "drainTimeoutSeconds": 30,
        "env": [{"name": k, "value": v} for k, v in WORKER_ENV.items()]})


def no_finalizers(realkube: RealCluster) -> list[str]:
    """The Jobwarden resources of the namespace that carry a finalizer (none may)."""
    found = []
    for plural in ("workerpools", "jobschedules", "exclusivejobs"):
        for item in realkube.api.list(plural, realkube.namespace):
            if item["metadata"].get("finalizers"):
                found.append(f"{plural}/{item['metadata']['name']}: "
                             f"{item['metadata']['finalizers']}")
    return found


def test_default_pool_runs_jobs_and_upgrades(realkube: RealCluster):
    release = realkube.install(values=default_pool_values(realkube))
    realkube.wait(lambda: ready_workers(realkube, 1), timeout=150,
                  what="the default pool's worker")
    job = realkube.client.enqueue("tests.support.testjobs:Record", {})
    realkube.wait(lambda: realkube.client.job(job.id).status == "completed", timeout=60,
                  what="a job run by the default pool")

    # The documented CRD upgrade path: helm show crds | kubectl apply --server-side.
    crds = realkube.helm("show", "crds", str(CHART))
    realkube.kubectl("apply", "--server-side", "-f", "-", input=crds)

    # A values change: the pool grows, the operator is replaced (Recreate) with debug logs.
    operator_pods = {p["metadata"]["name"]
                     for p in realkube.pods("app.kubernetes.io/component=operator")}
    realkube.helm("upgrade", release, str(CHART), "--namespace", realkube.namespace,
                  "--reuse-values", "--set", "workerPool.replicas=2",
                  "--set", "operator.logLevel=debug", "--wait", "--timeout", "180s",
                  timeout=240)
    realkube.wait(lambda: ready_workers(realkube, 2), timeout=150, what="two workers")
    now = {p["metadata"]["name"] for p in realkube.pods("app.kubernetes.io/component=operator")}
    assert now and not (now & operator_pods)
    deployment = realkube.api.get("deployments", f"{release}-jobwarden-operator",
                                  realkube.namespace)
    assert deployment is not None
    env = {e["name"]: e.get("value") for e in
           deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["JOBWARDEN_LOG_LEVEL"] == "debug"


def test_helm_uninstall_then_namespace_deletion_complete(realkube: RealCluster):
    """Found by this tier (issue #13): helm deletes the operator's Role/RoleBinding and
    Deployment in the same instant as the chart's WorkerPool, so a finalizer on the pool
    hung it in Terminating. The operator puts none on any resource now (#14)."""
    release = realkube.install(values=default_pool_values(realkube))
    realkube.wait(lambda: ready_workers(realkube, 1), timeout=150, what="a worker")
    assert no_finalizers(realkube) == []

    # Uninstall: every release object goes, the pool's pods included.
    realkube.releases.remove(release)
    realkube.helm("uninstall", release, "--namespace", realkube.namespace, "--wait",
                  "--timeout", "60s", timeout=120)
    realkube.wait(lambda: realkube.api.get("workerpools", "default", realkube.namespace)
                  is None, timeout=60, what="the default pool gone")
    realkube.wait(lambda: realkube.pods(alive=False) == [], timeout=90, what="no pod left")

    # The namespace deletion completes (no finalizer left behind anywhere).
    realkube.api.delete("namespaces", realkube.namespace, None)
    realkube.wait(lambda: realkube.api.get("namespaces", realkube.namespace, None) is None,
                  timeout=60, what="the namespace gone")


def test_namespace_deletion_with_live_resources_completes(realkube: RealCluster):
    """Deleting the namespace under a running release: nothing blocks the namespace
    controller. (With a finalizer it hung: the namespace's ServiceAccount, whose token
    the operator uses, goes at once, so the operator could not remove it.)"""
    realkube.install(values=default_pool_values(realkube))
    realkube.wait(lambda: ready_workers(realkube, 1), timeout=150, what="a worker")
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "metadata": {"name": "tick", "namespace": realkube.namespace},
        "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Noop"}}})
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
        "metadata": {"name": "once", "namespace": realkube.namespace},
        "spec": {"job": {"class": "tests.support.testjobs:Noop"}}})
    row = f"{realkube.namespace}/tick"
    realkube.wait(lambda: realkube.client.schedules.get(row) is not None, timeout=60,
                  what="the schedule's row written by the operator")
    realkube.wait(lambda: (realkube.api.get("exclusivejobs", "once", realkube.namespace) or {})
                  .get("status", {}).get("jobId"), timeout=60, what="the exclusive job's job")
    assert no_finalizers(realkube) == []
    realkube.api.delete("namespaces", realkube.namespace, None)
    try:
        realkube.wait(lambda: realkube.api.get("namespaces", realkube.namespace, None) is None,
                      timeout=60, what="the namespace gone")
    except AssertionError:
        left = subprocess.run(
            [str(realkube.kubectl.binary), f"--kubeconfig={realkube.plane.kubeconfig}",
             "get", "jobwarden,pods", "-n", realkube.namespace, "-o", "yaml"],
            capture_output=True, text=True, check=False, timeout=60).stdout
        raise AssertionError(f"namespace not deleted; left:\n{left[-4000:]}") from None
    realkube.releases.clear()
