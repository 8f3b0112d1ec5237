"""The operator's per-resource series on the real control plane: readiness, and none left
behind when the resource is deleted (issue 27, "Metric hygiene").

A JobSchedule whose time zone does not exist is accepted by the API server and refused
by the operator (``Ready=False InvalidSpec``): ``jobwarden_resource_ready`` says 0 for
it and 1 for a valid one, read from the status the API server holds; deleting them
removes their series (before, per-resource series grew without bound: one per one-shot
ExclusiveJob in ``jobwarden_pod_runs_total``). No ``_created`` series anywhere.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def schedule(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": "tests.support.testjobs:Record"}, **spec}}


def test_readiness_is_exported_per_resource_and_removed_with_it(realkube: RealCluster):
    ns = realkube.namespace
    realkube.install()
    realkube.api.create(schedule("bad", ns, schedule="0 2 * * *", timeZone="Europe/Berlinn"))
    realkube.api.create(schedule("good", ns, interval="1h"))

    def scrape() -> str:
        (port,) = realkube.operator_ports()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    bad = f'jobwarden_resource_ready{{kind="JobSchedule",resource="{ns}/bad"}}'
    good = f'jobwarden_resource_ready{{kind="JobSchedule",resource="{ns}/good"}}'
    realkube.wait(lambda: f"{bad} 0.0" in (text := scrape()) and f"{good} 1.0" in text,
                  timeout=60, what="readiness of both schedules exported")
    assert "_created" not in scrape()

    realkube.kubectl("delete", "jobschedule", "bad", "good", "-n", ns)
    realkube.wait(lambda: f'resource="{ns}/' not in scrape() and
                  f'schedule="{ns}/' not in scrape(),
                  timeout=60, what="the deleted schedules' series removed")
