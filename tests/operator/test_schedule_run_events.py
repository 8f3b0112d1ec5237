"""Per-run Events on a JobSchedule through the real operator, a real worker, the emulated
API and PostgreSQL: enqueued, succeeded and failed runs are told as a CronJob tells
them, and a schedule firing every second does not flood the API (one Event of a
reason, then the next ones aggregated a minute later: tests/operator/test_run_events.py)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator.conftest import OperatorProcess
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

SCHEDULE = """
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {{name: {name}}}
spec:
  interval: 1s
  job: {{class: "{job}", maxRetries: 0}}
"""


def reasons(kube_api: KubeAPI, name: str) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((str(e["type"]), str(e["reason"]))
                               for e in kube_api.events("default", involved=name))


def runs(client: Client, name: str, status: str) -> int:
    return sum(1 for j in client.jobs(status=status, limit=1000)
               if j.schedule_name == f"default/{name}")


def test_runs_are_told_once_and_a_fast_schedule_does_not_flood(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess],
        start_worker: Callable[..., Any]) -> None:
    start_operator(kube_api)
    start_worker(queues=["default"])
    kubectl.apply(SCHEDULE.format(name="ping", job="tests.support.testjobs:Noop"))
    kubectl.apply(SCHEDULE.format(name="boom", job="tests.support.testjobs:Boom"))
    wait_for(lambda: {("Normal", "SuccessfulCreate"), ("Normal", "SawCompletedJob")}
             <= set(reasons(kube_api, "ping")), timeout=60, message="ping's run Events")
    failed = wait_for(lambda: [e for e in kube_api.events("default", involved="boom")
                               if e["reason"] == "JobFailed"], timeout=60,
                      message="boom's JobFailed")
    assert failed[0]["type"] == "Warning"
    assert "RuntimeError: boom on attempt 1" in failed[0]["message"]
    assert "(slot " in failed[0]["message"]
    # Ten more runs of each in the next seconds: no more Events of those reasons (the
    # next ones are told together a minute after the first).
    done = runs(client, "ping", "completed")
    wait_for(lambda: runs(client, "ping", "completed") >= done + 10, timeout=60,
             message="ten more completed runs")
    counted = reasons(kube_api, "ping")
    assert counted[("Normal", "SuccessfulCreate")] == 1, counted
    assert counted[("Normal", "SawCompletedJob")] == 1, counted
    assert reasons(kube_api, "boom")[("Warning", "JobFailed")] == 1
