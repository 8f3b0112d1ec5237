"""A WorkerPool brings up worker processes that run scheduled jobs; status says so."""

from __future__ import annotations

import pytest

from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.structs.states import JobStatus
from tests.e2e.conftest import NAMESPACE, Cluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})


def test_a_pool_and_an_interval_schedule_run_jobs_in_the_pool_s_worker_processes(
        cluster: Cluster):
    cluster.apply_pool("workers", replicas=2, image="example/jobs:1.0.0")
    cluster.wait(lambda: cluster.settled("workers", replicas=2, version="1.0.0"),
                 timeout=90, what="two ready pods")
    pods = {p["metadata"]["name"] for p in cluster.pods()}
    pool = cluster.pool()
    assert pool["status"]["selector"] == f"{pools_spec.POOL_LABEL}=workers"
    assert condition(pool, "Available")["status"] == "True"
    assert condition(pool, "Draining")["status"] == "False"
    # Every pod is a registered host of the pool, running the pool's code version.
    hosts = {h.name: h for h in cluster.client.hosts.status(pool="workers")}
    assert set(hosts) == pods
    assert {h.code_version for h in hosts.values()} == {"1.0.0"}

    cluster.api.create({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "metadata": {"name": "every-second", "namespace": NAMESPACE},
        "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Record"},
                 "workerPool": "workers"}})

    def completed_jobs() -> list:
        jobs = cluster.client.jobs(status="completed")
        return jobs if len(jobs) >= 3 else []

    jobs = cluster.wait(completed_jobs, timeout=60, what="three scheduled jobs completed")
    assert {j.claimed_by for j in jobs} <= pods
    cluster.api.wait_for("js", "every-second", NAMESPACE, timeout=30, condition=lambda o: (
        (o.get("status") or {}).get("lastJob", {}).get("status") == "completed"))
    events = {e["reason"] for e in cluster.api.events(NAMESPACE, involved="workers")}
    assert "Created" in events
    assert all(j.status is JobStatus.COMPLETED for j in jobs)
    wait_for(lambda: cluster.operator.metric("jobwarden_operator_reconciles_total",
                                             kind="WorkerPool") is not None, timeout=10)
