"""Issue 18's pod-per-run scenarios on the real control plane: the operator installed by
Helm (the chart's RBAC, nothing more), the real kube-apiserver's admission, ownership
and garbage collection, and the process kubelet running `jobwarden run-job` in every pod
it binds to its Node.

The scenarios are tests/e2e/podrunscenarios.py, the same the emulator tier runs
(tests/e2e/test_pod_runs.py); each test here arranges the cluster(s) and says which.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from jobwarden.client import Client
from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import RealCluster, open_cluster
from tests.cluster.controlplane import ControlPlane
from tests.e2e import podrunscenarios as scenarios

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


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


def test_replace_stops_the_old_pod_before_the_new_run_starts(realkube: RealCluster) -> None:
    realkube.install()
    scenarios.replace_stops_the_old_pod_first(realkube.site())


def test_an_exclusive_job_in_a_pod_defers_while_its_key_is_held_without_a_pod(
        realkube: RealCluster) -> None:
    realkube.install()
    scenarios.exclusive_defers_without_a_pod(realkube.site())


def test_a_pod_that_never_starts_is_reported_and_its_run_retried(
        realkube: RealCluster) -> None:
    realkube.install()
    scenarios.never_started_pod_is_retried(realkube.site())
