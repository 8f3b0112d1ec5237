"""What ExclusiveJobs cost the API server: one status write per new object, none at a restart.

Counted, not timed, as for JobSchedules (test_schedule_writes.py): through
kopf's change handlers each new ExclusiveJob cost two PATCHes (kopf's
``last-handled-configuration`` annotation, then the status), sent with no
bound; at a start with 1,000 of them on the real plane the API server answered
thousands with 504s (docs/benchmarks.md, "Operator at scale"). Through the
change queue and the status writers (controller/changes.py, statuswrites.py)
it costs the status write only, once, and nothing when it is as it should be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator import test_schedule_writes as writes_of
from tests.operator.conftest import OperatorProcess
from tests.support.kube import KubeAPI
from tests.support.waiting import wait_for

EXCLUSIVE = 20


def exclusive(name: str) -> dict[str, Any]:
    """An ExclusiveJob whose job stays pending (no worker runs here)."""
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"job": {"class": "tests.support.testjobs:Noop", "data": {"n": name}},
                     "concurrencyKey": f"key-{name}"}}


def reconciled(operator: OperatorProcess, result: str) -> float:
    return writes_of.reconciled(operator, result, kind="ExclusiveJob")


def wait_skipped_once_more(operator: OperatorProcess, message: str) -> None:
    writes_of.wait_skipped_once_more(operator, message, kind="ExclusiveJob", count=EXCLUSIVE)


def every_status_written(kube_api: KubeAPI) -> bool:
    found = kube_api.list("exclusivejobs", "default")
    return len(found) == EXCLUSIVE and all(
        (o.get("status") or {}).get("phase") == "Pending" for o in found)


def test_new_exclusive_jobs_cost_one_status_write_each_and_a_restart_writes_nothing(
        kube_api: KubeAPI, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    seen = len(kube_api.requests)
    for i in range(EXCLUSIVE):
        kube_api.create(exclusive(f"x{i}"))
    wait_for(lambda: every_status_written(kube_api), timeout=90,
             message="every ExclusiveJob's status")
    wait_for(lambda: reconciled(operator, "created") == EXCLUSIVE, timeout=120,
             message="a job enqueued for every ExclusiveJob")
    # Settled: every object skipped by the resync loop once since (its digest held).
    wait_skipped_once_more(operator, "the resync loop skipping the settled objects")

    made = writes_of.writes(kube_api.requests[seen:])
    annotated, statuses = writes_of.object_writes(made, "exclusivejobs")
    assert annotated == []  # no kopf annotation (nor any other write of the object)
    assert sorted(statuses) == sorted(
        f"PATCH /apis/jobwarden.io/v1alpha1/namespaces/default/exclusivejobs/x{i}/status"
        for i in range(EXCLUSIVE))  # one each
    assert len(client.jobs()) == EXCLUSIVE

    # A restart: every object is passed again (its job and status are as they should
    # be), and nothing is written -- no status, no annotation, no second job.
    operator.stop()
    seen = len(kube_api.requests)
    operator = start_operator(kube_api)
    wait_for(lambda: reconciled(operator, "unchanged") >= EXCLUSIVE, timeout=90,
             message="a pass of every object after the restart")
    wait_skipped_once_more(operator, "the resync loop skipping the resumed objects")
    assert reconciled(operator, "unchanged") == EXCLUSIVE  # one pass each
    assert [w for w in writes_of.writes(kube_api.requests[seen:]) if "/exclusivejobs" in w] == []
    assert reconciled(operator, "created") == 0
    assert len(client.jobs()) == EXCLUSIVE
