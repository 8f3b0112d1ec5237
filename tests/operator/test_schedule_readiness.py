"""A JobSchedule whose runs cannot work is not Ready, and says why (issue 27).

* its job class does not import where the workers run (`nosuch.module:Thing`): the
  worker that fails to import it records the failure, and the operator reports
  Ready=False `JobClassNotImportable` with a Warning Event, until a run succeeds;
* it runs in pods of its own and its DSN Secret is missing: Ready=False
  `SecretNotFound` with a Warning Event, Ready=True (`Recovered`) once it exists.

The real `jobwarden operator`, the emulated API, a real worker and PostgreSQL.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator.conftest import OperatorProcess, condition
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

BROKEN = """
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {name: broken}
spec:
  interval: 1s
  job: {class: "nosuch.module:Thing", maxRetries: 0}
"""
POD_RUN = """
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {name: export}
spec:
  schedule: "0 3 * * *"
  job: {class: "tests.support.testjobs:Noop"}
  podTemplate:
    spec:
      containers:
        - {name: job, image: "example/jobs:1"}
  dsnSecretRef: {name: export-dsn}
"""


def ready(obj: dict[str, Any] | None) -> dict[str, Any]:
    return condition(obj, "Ready")


def test_a_schedule_whose_class_does_not_import_is_not_ready(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess],
        start_worker: Callable[..., Any]) -> None:
    start_operator(kube_api)
    kubectl.apply(BROKEN)
    # Ready while no worker has tried it (the operator cannot import app code).
    kube_api.wait_for("js", "broken", timeout=30,
                      condition=lambda o: ready(o).get("status") == "True")
    start_worker(queues=["default"])
    obj = kube_api.wait_for("js", "broken", timeout=60, condition=lambda o: ready(o).get(
        "reason") == "JobClassNotImportable")
    condition = ready(obj)
    assert condition["status"] == "False"
    assert "nosuch.module:Thing" in condition["message"]
    assert "cannot import module 'nosuch.module'" in condition["message"]
    assert "test-host-0" in condition["message"]
    warnings = wait_for(lambda: [e for e in kube_api.events("default", involved="broken")
                                 if e["reason"] == "JobClassNotImportable"], timeout=20,
                        message="the Warning Event")
    assert [e["type"] for e in warnings] == ["Warning"]
    # Each failing run does not add a record or an Event: one write a minute per class.
    failed = wait_for(lambda: len([j for j in client.jobs(status="failed", limit=100)
                                   if j.schedule_name == "default/broken"]) >= 3,
                      timeout=30, message="three failed runs")
    assert failed
    assert len([e for e in kube_api.events("default", involved="broken")
                if e["reason"] == "JobClassNotImportable"]) == 1
    with client.db.connection() as conn:
        row = conn.execute("SELECT failures FROM jobwarden.job_class_failures "
                           "WHERE job_class = 'nosuch.module:Thing'").fetchone()
    assert row == (1,)


def test_a_pod_run_schedule_without_its_dsn_secret_is_not_ready_until_it_exists(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client, dsn: str,
        start_operator: Callable[..., OperatorProcess]) -> None:
    start_operator(kube_api)
    kubectl.apply(POD_RUN)
    obj = kube_api.wait_for("js", "export", timeout=30,
                            condition=lambda o: ready(o).get("reason") == "SecretNotFound")
    assert ready(obj)["status"] == "False"
    assert "Secret default/export-dsn" in ready(obj)["message"]
    assert client.schedules.get("default/export") is not None  # the row is right
    kube_api.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "export-dsn", "namespace": "default"},
                     "data": {"dsn": base64.b64encode(dsn.encode()).decode()}})
    kube_api.wait_for("js", "export", timeout=30,
                      condition=lambda o: ready(o).get("status") == "True")
    # A transition's Event is posted once the status recording it is written (issue 27).
    def reasons() -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for e in kube_api.events("default", involved="export")]

    wait_for(lambda: ("Normal", "Recovered") in reasons(), timeout=30,
             message="the Recovered Event")
    assert reasons().count(("Warning", "SecretNotFound")) == 1, reasons()
    assert dsn not in str(kube_api.events("default", involved="export"))
