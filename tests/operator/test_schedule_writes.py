"""What JobSchedules cost the API server: one status write per new object, none at a restart.

Counted, not timed: the emulated API server records every request. Through
kopf's change handlers each new JobSchedule cost two PATCHes (kopf's
``last-handled-configuration`` annotation, then the status), sent with no bound;
at a start with 10,000 the API server answered thousands with 504s
(docs/benchmarks.md, "Operator at scale"). The change queue
(controller/changes.py) writes the status only, once, and writes nothing for
an object that is already as it should be; and its status writes are sent by
writers of their own (controller/statuswrites.py), so a slow API server delays
the statuses, not the rows.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import kmock

from jobwarden.api.client import Client
from jobwarden.controller import statuswrites
from tests.operator.conftest import OperatorProcess, quiet_schedule
from tests.support.kube import KubeAPI
from tests.support.waiting import wait_for

SCHEDULES = 30


def writes(requests: list[Any]) -> list[str]:
    """The requests that change something (watches and reads are not)."""
    return [f"{r.method.value} {r.url.path}" for r in requests
            if r.method.value not in ("GET", "HEAD")]


def reconciled(operator: OperatorProcess, result: str, kind: str = "JobSchedule") -> float:
    return operator.metric("jobwarden_operator_reconciles_total", kind=kind,
                           result=result) or 0.0


def wait_skipped_once_more(operator: OperatorProcess, message: str, *,
                           kind: str = "JobSchedule", count: int = SCHEDULES) -> None:
    """Until the resync loop has skipped every object once more (its digest held)."""
    def skipped() -> float:
        return operator.metric("jobwarden_operator_passes_skipped_total", kind=kind) or 0.0
    settled = skipped()
    wait_for(lambda: skipped() >= settled + count, timeout=60, message=message)


def object_writes(made: list[str], plural: str) -> tuple[list[str], list[str]]:
    """Of the writes ``made``: the PATCHes of a ``plural`` object itself (kopf's
    annotation, for one), and the status PATCHes."""
    annotated = [w for w in made if w.startswith("PATCH ") and f"/{plural}/" in w
                 and not w.endswith("/status")]
    statuses = [w for w in made if w.startswith("PATCH ") and w.endswith("/status")]
    return annotated, statuses


def every_status_written(kube_api: KubeAPI) -> bool:
    found = kube_api.list("jobschedules", "default")
    return len(found) == SCHEDULES and all(
        (o.get("status") or {}).get("conditions") for o in found)


def test_new_schedules_cost_one_status_write_each_and_a_restart_writes_nothing(
        kube_api: KubeAPI, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    seen = len(kube_api.requests)
    for i in range(SCHEDULES):
        kube_api.create(quiet_schedule(f"s{i}"))
    wait_for(lambda: every_status_written(kube_api), timeout=90,
             message="every JobSchedule's status")
    wait_for(lambda: len(client.schedules.list()) == SCHEDULES, timeout=30,
             message="every schedule row")
    wait_for(lambda: len(kube_api.events("default")) >= SCHEDULES, timeout=30,
             message="a Created Event per schedule")
    # Settled: every object skipped by the resync loop once since (its digest held).
    wait_skipped_once_more(operator, "the resync loop skipping the settled objects")

    made = writes(kube_api.requests[seen:])
    annotated, statuses = object_writes(made, "jobschedules")
    events = [w for w in made if w.startswith("POST ") and w.endswith("/events")]
    print(f"{len(made)} writes: {len(statuses)} status, {len(events)} Events")
    assert annotated == []  # no kopf annotation (nor any other write of the object)
    assert sorted(statuses) == sorted(
        f"PATCH /apis/jobwarden.io/v1alpha1/namespaces/default/jobschedules/s{i}/status"
        for i in range(SCHEDULES))  # one each
    assert [e["reason"] for e in kube_api.events("default")] == ["Created"] * SCHEDULES
    assert reconciled(operator, "created") == SCHEDULES

    # A restart: every object is passed again (its row and status are as they should
    # be), and nothing is written -- no status, no Event, no annotation.
    operator.stop()
    seen = len(kube_api.requests)
    operator = start_operator(kube_api)
    wait_for(lambda: reconciled(operator, "unchanged") >= SCHEDULES, timeout=90,
             message="a pass of every object after the restart")
    wait_skipped_once_more(operator, "the resync loop skipping the resumed objects")
    assert reconciled(operator, "unchanged") == SCHEDULES  # one pass each
    assert [w for w in writes(kube_api.requests[seen:])
            if "/jobschedules" in w or w.endswith("/events")] == []
    assert len(client.schedules.list()) == SCHEDULES


def test_every_row_is_created_while_the_api_server_holds_every_status_write(
        kube_api: KubeAPI, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    """Before, each change-queue thread waited for its pass's status PATCH before the
    next object: on a slow API server the rows came at its pace (473 s to 1,000 rows
    on the real plane, docs/benchmarks.md). Now the passes go on; the writes wait,
    at most WRITERS of them in flight, and each is sent once the server answers."""
    released = threading.Event()
    holding: list[str] = []

    async def held(request: kmock.Request) -> StopIteration:
        holding.append(str(request.url.path))
        await asyncio.to_thread(released.wait, 300)
        return StopIteration()  # then served as usual

    kube_api.emulator["patch", kmock.resource("jobwarden.io", "v1alpha1", "jobschedules"),
                      kmock.subresource("status")] << held
    operator = start_operator(kube_api)
    seen = len(kube_api.requests)
    try:
        for i in range(SCHEDULES):
            kube_api.create(quiet_schedule(f"s{i}"))
        wait_for(lambda: len(client.schedules.list()) == SCHEDULES, timeout=90,
                 message="every schedule row while every status write is held")
        wait_for(lambda: len(holding) == statuswrites.WRITERS, timeout=30,
                 message="every status writer waiting for the API server")
        assert not any((o.get("status") or {}).get("conditions")
                       for o in kube_api.list("jobschedules", "default"))
    finally:
        released.set()
    wait_for(lambda: every_status_written(kube_api), timeout=90,
             message="every JobSchedule's status, once the API server answers")
    wait_skipped_once_more(operator, "the resync loop skipping the settled objects")
    statuses = [w for w in writes(kube_api.requests[seen:])
                if w.startswith("PATCH ") and w.endswith("/status")]
    assert sorted(statuses) == sorted(
        f"PATCH /apis/jobwarden.io/v1alpha1/namespaces/default/jobschedules/s{i}/status"
        for i in range(SCHEDULES))  # one each
