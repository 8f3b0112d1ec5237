"""Issue 18's pod-per-run scenarios on the real control plane: the operator installed by
Helm (the chart's RBAC, nothing more), the real kube-apiserver's admission, ownership
and garbage collection, and the process kubelet running `jobwarden run-job` in every pod
it binds to its Node.

The scenarios are tests/e2e/podrunscenarios.py, the same the emulator tier runs
(tests/e2e/test_pod_runs.py); each test here arranges the cluster(s) and says which.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest

from jobwarden.api.client import Client
from jobwarden.structs.states import JobStatus
from tests.cluster.api import ApiError
from tests.cluster.conftest import RealCluster, open_cluster
from tests.cluster.controlplane import ControlPlane
from tests.cluster.scheduling import UnschedulableReporter
from tests.e2e import podrunscenarios as scenarios
from tests.e2e.kubelet import ProcessKubelet

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


@pytest.mark.timeout(900)  # 250-260 s on a machine with ~40% of its CPU stolen
def test_two_clusters_on_one_database_run_one_pod_and_one_job_per_slot_with_history_pruned(
        realkube: RealCluster, second_plane: ControlPlane, client: Client,
        tmp_path: Path) -> None:
    """The same interval JobSchedule with a pod template in two clusters (each its own
    control plane, node and operator, ``operator.clusterName`` a and b) on one database:
    each slot's job is claimed by one operator and runs in one pod, in its cluster."""
    with open_cluster(second_plane, namespace=realkube.namespace, dsn=realkube.dsn,
                      client=client, workdir=tmp_path / "cluster-b") as other:
        for cluster, name in ((realkube, "a"), (other, "b")):
            values = cluster.base_values(operator={**cluster.base_values()["operator"],
                                                   "clusterName": name})
            cluster.install(f"jw-{name}-{uuid.uuid4().hex[:4]}", values=values)
        scenarios.one_pod_and_one_job_per_slot([realkube.site(), other.site()], "tick")


@pytest.mark.parametrize(("job", "after"), [
    ("tests.support.testjobs:Sleepy", JobStatus.COMPLETED),
    ("tests.support.testjobs:SleepyOnce", JobStatus.INTERRUPTED),
], ids=["idempotent-retried", "non-idempotent-interrupted"])
def test_a_pod_killed_mid_run_ends_by_the_dead_worker_rules(
        realkube: RealCluster, job: str, after: JobStatus) -> None:
    realkube.install()
    scenarios.killed_mid_run(realkube.site(), job, after)


@pytest.mark.parametrize("forced", [False, True], ids=["graceful", "forced"])
def test_replace_stops_the_old_pod_before_the_new_run_starts(realkube: RealCluster,
                                                             forced: bool) -> None:
    realkube.install()
    scenarios.replace_stops_the_old_pod_first(realkube.site(), forced=forced)


def test_an_exclusive_job_in_a_pod_defers_while_its_key_is_held_without_a_pod(
        realkube: RealCluster) -> None:
    realkube.install()
    scenarios.exclusive_defers_without_a_pod(realkube.site())


@pytest.mark.timeout(600)  # two 45 s start deadlines and a retry, on a slow machine
def test_a_pod_that_never_starts_for_a_missing_secret_is_reported_and_its_run_retried(
        realkube: RealCluster) -> None:
    """The kubelet cannot create the container (CreateContainerConfigError) until the
    Secret its env names exists."""
    realkube.install()
    scenarios.never_started_pod_is_retried(realkube.site(), scenarios.MISSING_SECRET)


@pytest.mark.timeout(600)  # two 45 s start deadlines and a retry, on a slow machine
def test_an_unschedulable_pod_is_reported_and_its_run_retried_on_a_node_that_joins(
        realkube: RealCluster) -> None:
    """No node has the label the template selects: PodScheduled=False, Unschedulable, as
    kube-scheduler reports it (tests/cluster/scheduling.py: the tier runs no scheduler);
    after the report a node with the label joins and a retry's pod runs there."""
    realkube.install()
    site = realkube.site()
    batch = f"batch-{realkube.namespace}"

    def batch_node_joins(site: scenarios.Site, _: str) -> None:
        assert realkube.plane.pki is not None
        site.more_kubelets.append(ProcessKubelet(
            realkube.api, workdir=realkube.workdir / batch, namespace=realkube.namespace,
            node=batch, server=realkube.plane.server, ca_file=realkube.plane.pki.ca_cert,
            extra_env={"JOBWARDEN_TEST_AUDIT_DSN": realkube.dsn}, interval=0.2,
            labels={"pool": "batch"}).start())

    reporter = UnschedulableReporter(realkube.api, realkube.namespace,
                                     lambda: [k.node or "" for k in site.kubelets])
    try:
        with reporter.running():
            scenarios.never_started_pod_is_retried(site, scenarios.no_matching_node(
                batch_node_joins))
        assert not reporter.errors, reporter.errors
        (ran,) = scenarios.started_pods(site, "stuck")
        assert (realkube.api.get("pods", ran, realkube.namespace) or {})["spec"][
            "nodeName"] == batch
    finally:
        for kubelet in site.more_kubelets:
            # Its pods go first (forced: no kubelet would confirm them once it stopped, and
            # the namespace's deletion would wait on them), then the node.
            for pod in realkube.api.list("pods", realkube.namespace,
                                         fields=f"spec.nodeName={kubelet.node}"):
                with contextlib.suppress(ApiError):
                    realkube.api.delete("pods", pod["metadata"]["name"], realkube.namespace,
                                        grace=0)
            kubelet.stop()
            with contextlib.suppress(ApiError):
                realkube.api.delete("nodes", kubelet.node or "", None)
