"""An operator with many resources and nothing changing: no API call and no pass per object.

Counted, not timed: the emulated API server records every request, and the
operator's counters say how many resync passes it ran and skipped. With its
status interval at 0.3 s, each object is due a dozen times while the test
watches; before the digests (controller/kube/kinds.py) each due object cost a
full pass -- several queries -- and at 3,100 JobSchedules the idle operator used
60% of a core (docs/benchmarks.md, "Operator at scale").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator.conftest import OperatorProcess, condition, quiet_schedule
from tests.support.kube import KubeAPI
from tests.support.waiting import wait_for

SCHEDULES = 40
EXCLUSIVE = 10
#: Passes each object is due while the test counts.
PASSES = 5


def exclusive(name: str) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"job": {"class": "tests.support.testjobs:Noop"},
                     "concurrencyKey": f"rest-{name}"}}


def operator_calls(requests: list[Any]) -> list[str]:
    """The non-watch requests (kopf's watch streams stay open; they are not calls)."""
    return [f"{r.method.value} {r.url.path}" for r in requests
            if str(r.params.get("watch", "")).lower() not in ("true", "1")]


def counter(operator: OperatorProcess, name: str, **labels: str) -> float:
    return operator.metric(name, **labels) or 0.0


def skipped(operator: OperatorProcess) -> float:
    return sum(counter(operator, "jobwarden_operator_passes_skipped_total", kind=kind)
               for kind in ("JobSchedule", "ExclusiveJob"))


def reconciles(operator: OperatorProcess) -> float:
    total = 0.0
    _, text = operator.get("/metrics")
    for line in text.splitlines():
        if line.startswith("jobwarden_operator_reconciles_total{"):
            total += float(line.rpartition(" ")[2])
    return total


def test_idle_objects_cost_no_api_call_and_no_pass_until_their_row_changes(
        kube_api: KubeAPI, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    for i in range(SCHEDULES):
        kube_api.create(quiet_schedule(f"s{i}"))
    for i in range(EXCLUSIVE):
        kube_api.create(exclusive(f"x{i}"))
    objects = SCHEDULES + EXCLUSIVE

    def every_status_written() -> bool:
        found = [o for kind in ("jobschedules", "exclusivejobs")
                 for o in kube_api.list(kind, "default")]
        return len(found) == objects and all(
            (o.get("status") or {}).get("conditions") for o in found)

    wait_for(every_status_written, timeout=90, message="every object reconciled")
    wait_for(lambda: len(client.schedules.list()) == SCHEDULES, timeout=30,
             message="every schedule row")
    # Settled: every object has been skipped at least once since.
    settled = skipped(operator)
    wait_for(lambda: skipped(operator) >= settled + objects, timeout=60,
             message="the resync loop skipping the idle objects")

    seen, passes, start = len(kube_api.requests), reconciles(operator), skipped(operator)
    wait_for(lambda: skipped(operator) >= start + PASSES * objects, timeout=120,
             message=f"{PASSES} due passes of every object")
    calls = operator_calls(kube_api.requests[seen:])
    per_object = [c for c in calls if "/jobschedules/" in c or "/exclusivejobs/" in c]
    print(f"{skipped(operator) - start:.0f} passes skipped, {len(calls)} API calls: {calls}")
    assert per_object == []  # no GET, no status PATCH of any object
    assert len(calls) <= 2, calls  # at most a verification LIST per kind
    assert reconciles(operator) == passes  # and no pass ran at all

    # A change in the database (a manual suspension) passes that object, and only it.
    client.schedules.suspend("default/s7")
    kube_api.wait_for("js", "s7", timeout=30,
                      condition=lambda o: suspended(o) == "True")
    assert reconciles(operator) >= passes + 1
    assert [o["metadata"]["name"] for o in kube_api.list("jobschedules", "default")
            if suspended(o) == "True"] == ["s7"]


def suspended(obj: dict[str, Any]) -> str | None:
    return condition(obj, "Suspended").get("status")
