"""The chart's life on a real control plane: the default WorkerPool of the
release runs workers, the documented CRD upgrade path and a values-changing
`helm upgrade` work, and `helm uninstall` then namespace deletion complete
(nothing is left hanging on a finalizer).
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.structs.schedules import OWNER_ABSENT
from tests.cluster.conftest import CHART, OPERATOR_PODS, RealCluster, pod_ready
from tests.e2e.conftest import WORKER_ENV

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def pool_status(realkube: RealCluster, name: str = "default") -> dict[str, Any]:
    pool = realkube.api.get("workerpools", name, realkube.namespace) or {}
    return pool.get("status") or {}


def ready_workers(realkube: RealCluster, count: int) -> bool:
    pods = realkube.pods(f"{pools_spec.POOL_LABEL}=default")
    ready = [p for p in pods if pod_ready(p)]
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


#: The operator's confirmation grace in these tests (chart value, as a user sets it).
GRACE = 8


def with_grace(values: dict[str, Any]) -> dict[str, Any]:
    values["operator"]["extraEnv"] = [*values["operator"]["extraEnv"], {
        "name": "JOBWARDEN_OWNER_GRACE_SECONDS", "value": str(GRACE)}]
    return values


def schedule_jobs(realkube: RealCluster, name: str) -> list[tuple[int, Any]]:
    """(id, created_at) of the schedule's jobs, oldest first (database clock)."""
    with realkube.client.db.connection() as conn:
        return [(int(i), at) for i, at in conn.execute(
            "SELECT id, created_at FROM jobwarden.jobs WHERE schedule_name = %s ORDER BY id",
            (name,)).fetchall()]


def assert_stops_firing(realkube: RealCluster, row: str) -> None:
    """With every operator of the cluster gone, a plain worker on the same database (the
    only runner left) suspends the schedule once its owner's confirmation has lapsed:
    no slot of it is enqueued after the last confirmation plus the grace, and none
    while the worker keeps running a control schedule of its own."""
    held = realkube.wait(lambda: (r := realkube.client.schedules.get(row)) is not None
                         and r.suspended_by == OWNER_ABSENT and r, timeout=GRACE + 60,
                         what="the schedule suspended by a plain worker's runner")
    assert held.suspended
    [owner] = [o for o in realkube.client.schedules.owners()
               if o.namespace == realkube.namespace]
    assert not owner.fresh and owner.grace_seconds == GRACE
    bound = owner.renewed_at + dt.timedelta(seconds=owner.grace_seconds)
    fired = schedule_jobs(realkube, row)
    assert fired, "the schedule ran before its resource went"
    # The bound: nothing enqueued later than the owner's last confirmation + its grace.
    assert max(at for _, at in fired) <= bound, (fired[-3:], bound)
    # And nothing more while the worker keeps enqueuing a schedule of its own.
    realkube.client.schedules.upsert("control", interval="1s",
                                     job_class="tests.support.testjobs:Noop", source="cli")
    realkube.wait(lambda: len(schedule_jobs(realkube, "control")) >= 4, timeout=60,
                  what="the worker's runner enqueuing a control schedule")
    assert schedule_jobs(realkube, row) == fired


def test_default_pool_runs_jobs_and_upgrades(realkube: RealCluster):
    release = realkube.install(values=default_pool_values(realkube))
    realkube.wait(lambda: ready_workers(realkube, 1), timeout=150,
                  what="the default pool's worker")
    job = realkube.client.enqueue("tests.support.testjobs:Record", {})
    realkube.wait(lambda: realkube.client.job(job.id).status == "completed", timeout=60,
                  what="a job run by the default pool")

    # The documented CRD upgrade path (docs/kubernetes.md): the chart's crds/ directory,
    # server-side. Every jobwarden.io CRD is applied -- `helm show crds | kubectl apply`
    # exited 0 having applied only kopf's (Helm joins the files without a `---`).
    realkube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    for plural in ("workerpools", "jobschedules", "exclusivejobs"):
        crd = realkube.kubectl.json("get", "crd", f"{plural}.jobwarden.io",
                                    "--show-managed-fields")
        assert ("kubectl", "Apply") in {(f["manager"], f["operation"])
                                        for f in crd["metadata"]["managedFields"]}, plural

    # A values change: the pool grows, the operator is replaced (Recreate) with debug logs.
    operator_pods = {p["metadata"]["name"]
                     for p in realkube.pods(OPERATOR_PODS)}
    realkube.helm("upgrade", release, str(CHART), "--namespace", realkube.namespace,
                  "--reuse-values", "--set", "workerPool.replicas=2",
                  "--set", "operator.logLevel=debug", "--wait", "--timeout", "180s",
                  timeout=240)
    realkube.wait(lambda: ready_workers(realkube, 2), timeout=150, what="two workers")
    now = {p["metadata"]["name"] for p in realkube.pods(OPERATOR_PODS)}
    assert now and not (now & operator_pods)
    deployment = realkube.api.get("deployments", f"{release}-jobwarden-operator",
                                  realkube.namespace)
    assert deployment is not None
    env = {e["name"]: e.get("value") for e in
           deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["JOBWARDEN_LOG_LEVEL"] == "debug"


def test_helm_uninstall_then_namespace_deletion_complete(
        realkube: RealCluster, spawn_worker: Callable[..., subprocess.Popen[bytes]]):
    """Found by this tier (issue #13): helm deletes the operator's Role/RoleBinding and
    Deployment in the same instant as the chart's WorkerPool, so a finalizer on the pool
    hung it in Terminating. The operator puts none on any resource now (#14). A
    JobSchedule left behind by the uninstall (then deleted with its namespace) stops
    firing within the bound on a plain worker of the same database (issue 27)."""
    release = realkube.install(values=with_grace(default_pool_values(realkube)))
    realkube.wait(lambda: ready_workers(realkube, 1), timeout=150, what="a worker")
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "metadata": {"name": "ping", "namespace": realkube.namespace},
        "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Noop"}}})
    row = f"{realkube.namespace}/ping"
    worker = spawn_worker("--schedule-check-seconds", "0.2", "--queues", "nothing")
    realkube.wait(lambda: len(schedule_jobs(realkube, row)) >= 3, timeout=60,
                  what="the schedule firing")
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
    assert_stops_firing(realkube, row)
    assert worker.poll() is None


def test_namespace_deletion_with_live_resources_completes(
        realkube: RealCluster, spawn_worker: Callable[..., subprocess.Popen[bytes]]):
    """Deleting the namespace under a running release: nothing blocks the namespace
    controller. (With a finalizer it hung: the namespace's ServiceAccount, whose token
    the operator uses, goes at once, so the operator could not remove it.) The
    namespace holds the operator and the app's resources together (issue 27's
    `kubectl delete namespace jobwarden app1`): the schedule's row must stop firing
    within the documented bound although no operator of the cluster comes back."""
    realkube.install(values=with_grace(default_pool_values(realkube)))
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
    # A plain worker on the same database, outside the cluster: its runner fires the
    # schedule too (leaderless), and is the only runner left once the namespace goes.
    worker = spawn_worker("--schedule-check-seconds", "0.2", "--queues", "nothing")
    realkube.wait(lambda: len(schedule_jobs(realkube, row)) >= 3, timeout=60,
                  what="the schedule firing")
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
    assert_stops_firing(realkube, row)
    assert worker.poll() is None
