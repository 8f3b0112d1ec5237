"""The product through the real control plane: the operator installed by Helm,
workers in pods of a WorkerPool, and the jobs in PostgreSQL.

A JobSchedule enqueues one job per slot (the unique slot key is the database's
guarantee, the status mirrors it), and an ExclusiveJob whose lease is held
elsewhere defers, then succeeds once the lease is free.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster, secret, worker_pool

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def phase(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def running_pool(realkube: RealCluster, name: str = "workers", **spec: Any) -> None:
    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    realkube.api.create(worker_pool(name, realkube.namespace, "db", **spec))
    replicas = spec.get("replicas", 1)
    realkube.wait(lambda: ((realkube.api.get("workerpools", name, realkube.namespace) or {})
                           .get("status") or {}).get("readyReplicas") == replicas,
                  timeout=120, what=f"{replicas} ready workers")


def test_a_schedule_runs_one_job_per_slot_and_its_status_mirrors_the_database(
        realkube: RealCluster):
    realkube.install()
    running_pool(realkube)
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "metadata": {"name": "every-second", "namespace": realkube.namespace},
        "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Record"},
                 "workerPool": "workers"}})

    row = f"{realkube.namespace}/every-second"  # the schedule's name in the database

    def completed() -> list[Any]:
        jobs = [j for j in realkube.client.jobs(limit=1000, status="completed")
                if j.schedule_name == row]
        return jobs if len(jobs) >= 3 else []

    realkube.wait(completed, timeout=90, what="three completed slots")
    jobs = [j for j in realkube.client.jobs(limit=1000) if j.schedule_name == row]
    per_slot = collections.Counter(j.unique_key for j in jobs)
    assert per_slot and max(per_slot.values()) == 1, per_slot
    def mirrored() -> dict[str, Any] | None:
        obj = realkube.api.get("jobschedules", "every-second", realkube.namespace) or {}
        status: dict[str, Any] = obj.get("status") or {}
        done = (status.get("lastJob") or {}).get("status") == "completed"
        return status if done and (status.get("counts") or {}).get("enqueued", 0) >= 3 else None

    status = realkube.wait(mirrored, timeout=30, what="the status to show the runs")
    ids = {j.id for j in realkube.client.jobs(limit=1000)}
    assert int(status["lastJob"]["id"]) in ids
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "True"


def test_an_exclusive_job_defers_while_its_lease_is_held_then_succeeds(
        realkube: RealCluster):
    realkube.install()
    holder = realkube.client.lease("key:busy-key", ttl=60, owner="someone-else").acquire()
    running_pool(realkube, apps=["tests.support.leasejobs"])
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
        "metadata": {"name": "reindex", "namespace": realkube.namespace},
        "spec": {"job": {"class": "tests.support.leasejobs:BusyOnce", "timeoutSeconds": 10,
                         "data": {"index": "products"}},
                 "concurrencyKey": "busy-key", "lease": {"onBusy": "defer"},
                 "workerPool": "workers"}})

    def get() -> dict[str, Any] | None:
        return realkube.api.get("exclusivejobs", "reindex", realkube.namespace)

    deferred = realkube.wait(lambda: (o := get()) and phase(o) == "Deferred" and o,
                             timeout=60, what="Deferred")
    assert deferred["status"]["deferrals"] >= 1 and deferred["status"]["attempts"] == 0
    holder.release()
    done = realkube.wait(lambda: (o := get()) and phase(o) == "Succeeded" and o,
                         timeout=60, what="Succeeded")["status"]
    assert done["attempts"] == 1 and done["jobId"] == deferred["status"]["jobId"]
    assert done["lease"]["token"] > holder.token
    jobs = realkube.client.jobs(job_class="tests.support.leasejobs:BusyOnce")
    assert [j.id for j in jobs] == [int(done["jobId"])]
