"""What a JobSchedule reports about its runs, on the real control plane (the operator
installed by Helm, workers in pods of a WorkerPool run by the process kubelet; issue 27).

* A pod-run schedule whose DSN Secret is missing is Ready=False ``SecretNotFound`` with
  one Warning Event, and Ready=True with a Normal ``Recovered`` Event once it exists.
* A schedule whose job class does not import where the workers run is Ready=False
  ``JobClassNotImportable`` with one Warning Event.
* Runs are told as a CronJob tells them (``SuccessfulCreate``, ``SawCompletedJob``,
  ``JobFailed``), and a schedule firing every second posts at most one Event of a
  reason a minute.

The same scenarios on kmock's emulator: tests/operator/test_schedule_readiness.py and
tests/operator/test_schedule_run_events.py.
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster, secret, worker_pool

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def schedule(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def ready(realkube: RealCluster, name: str) -> dict[str, Any]:
    found = realkube.api.get("jobschedules", name, realkube.namespace) or {}
    for item in (found.get("status") or {}).get("conditions") or []:
        if item["type"] == "Ready":
            return dict(item)
    return {}


def events(realkube: RealCluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in realkube.api.events(realkube.namespace, involved=name)
            if e.get("reason") == reason]


def reasons(realkube: RealCluster, name: str) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((str(e.get("type")), str(e.get("reason")))
                               for e in realkube.api.events(realkube.namespace,
                                                            involved=name))


def created(event: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(event["metadata"]["creationTimestamp"])


def completed_runs(realkube: RealCluster, name: str) -> int:
    row = f"{realkube.namespace}/{name}"
    return sum(1 for j in realkube.client.jobs(status="completed", limit=1000)
               if j.schedule_name == row)


def test_a_pod_run_schedule_without_its_dsn_secret_is_not_ready_until_it_exists(
        realkube: RealCluster) -> None:
    realkube.install()
    ns = realkube.namespace
    realkube.kubectl.apply(schedule(
        "export", ns, schedule="0 3 * * *", job={"class": "tests.support.testjobs:Noop"},
        podTemplate={"spec": {"containers": [{"name": "job", "image": "example/jobs:1"}]}},
        dsnSecretRef={"name": "export-dsn"}))

    missing = realkube.wait(lambda: (c := ready(realkube, "export")).get(
        "reason") == "SecretNotFound" and c, timeout=120, what="Ready=False SecretNotFound")
    assert missing["status"] == "False"
    assert f"Secret {ns}/export-dsn" in missing["message"]
    realkube.wait(lambda: events(realkube, "export", "SecretNotFound"), timeout=60,
                  what="the SecretNotFound Event")

    realkube.api.create(secret("export-dsn", ns, realkube.dsn))
    realkube.wait(lambda: ready(realkube, "export").get("status") == "True", timeout=120,
                  what="Ready=True once the Secret exists")
    realkube.wait(lambda: events(realkube, "export", "Recovered"), timeout=60,
                  what="the Recovered Event")
    counted = reasons(realkube, "export")
    assert counted[("Warning", "SecretNotFound")] == 1, counted
    assert counted[("Normal", "Recovered")] == 1, counted
    assert realkube.dsn not in str(realkube.api.events(ns, involved="export"))


def test_runs_are_told_once_a_minute_and_a_class_that_does_not_import_is_not_ready(
        realkube: RealCluster) -> None:
    realkube.install()
    ns = realkube.namespace
    realkube.api.create(secret("db", ns, realkube.dsn))
    realkube.api.create(worker_pool("workers", ns, "db", replicas=1))
    realkube.wait(lambda: ((realkube.api.get("workerpools", "workers", ns) or {})
                           .get("status") or {}).get("readyReplicas") == 1,
                  timeout=150, what="a ready worker")
    for name, job_class in (("ping", "tests.support.testjobs:Noop"),
                            ("boom", "tests.support.testjobs:Boom"),
                            ("broken", "nosuch.module:Thing")):
        realkube.kubectl.apply(schedule(name, ns, interval="1s", workerPool="workers",
                                        job={"class": job_class, "maxRetries": 0}))

    # The class the workers cannot import: not Ready, one Warning naming the error.
    not_ready = realkube.wait(lambda: (c := ready(realkube, "broken")).get(
        "reason") == "JobClassNotImportable" and c, timeout=150,
        what="Ready=False JobClassNotImportable")
    assert not_ready["status"] == "False"
    assert "nosuch.module:Thing" in not_ready["message"]
    assert "cannot import module 'nosuch.module'" in not_ready["message"]
    realkube.wait(lambda: events(realkube, "broken", "JobClassNotImportable"), timeout=60,
                  what="the JobClassNotImportable Event")

    # Each run is told as a CronJob tells it.
    realkube.wait(lambda: {("Normal", "SuccessfulCreate"), ("Normal", "SawCompletedJob")}
                  <= set(reasons(realkube, "ping")), timeout=150,
                  what="ping's SuccessfulCreate and SawCompletedJob")
    failed = realkube.wait(lambda: events(realkube, "boom", "JobFailed"), timeout=150,
                           what="boom's JobFailed")
    assert failed[0]["type"] == "Warning"
    assert "RuntimeError: boom on attempt 1" in failed[0]["message"]
    assert "(slot " in failed[0]["message"]

    # Ten more runs of each, every second: no flood. Events of one reason are at least
    # a minute apart (a later one aggregates the runs since; under load the ten runs may
    # take longer than a minute), and the class failure is told once.
    done = completed_runs(realkube, "ping")
    realkube.wait(lambda: completed_runs(realkube, "ping") >= done + 10, timeout=150,
                  what="ten more completed runs of ping")
    for name, reason in (("ping", "SuccessfulCreate"), ("ping", "SawCompletedJob"),
                         ("boom", "SuccessfulCreate"), ("boom", "JobFailed")):
        told = sorted(created(e) for e in events(realkube, name, reason))
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(told)]
        assert told and all(gap >= 55 for gap in gaps), (name, reason, told)
    assert reasons(realkube, "broken")[("Warning", "JobClassNotImportable")] == 1
    assert ready(realkube, "broken")["reason"] == "JobClassNotImportable"
