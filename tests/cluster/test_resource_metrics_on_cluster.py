"""The operator's per-resource series on the real control plane: readiness, the alert on
it, and none left behind when the resource is deleted (issue 27, "Metric hygiene" and
"No alert when a resource is Ready=False").

A JobSchedule whose time zone does not exist is accepted by the API server and refused
by the operator (``Ready=False InvalidSpec``): ``jobwarden_resource_ready`` says 0 for
it and 1 for a valid one, read from the status the API server holds, and a real
Prometheus evaluating the chart's rules (``for`` shortened through values only) fires
JobwardenResourceNotReady for the invalid one only. Deleting them removes their series,
and with them the alert (before, per-resource series grew without bound: one per
one-shot ExclusiveJob in ``jobwarden_pod_runs_total``). No ``_created`` series anywhere.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster
from tests.cluster.promserver import chart_rules, pod_targets, ready, start_prometheus

pytestmark = [pytest.mark.realkube, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus missing (Debian package prometheus)")]

RULES = {"prometheusRule": {"enabled": True, "operatorJob": "operator", "rules": {
    "resourceNotReady": {"for": "0s"},
    # Not 0s: absent(up) holds for the second before Prometheus' first scrape.
    "operatorDown": {"for": "20s"}}}}
ALERT = "JobwardenResourceNotReady"


def schedule(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": "tests.support.testjobs:Record"}, **spec}}


def test_readiness_is_exported_alerted_on_and_removed_with_the_resource(
        realkube: RealCluster, tmp_path: Path) -> None:
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

    jobs = pod_targets(realkube)
    assert jobs["operator"], jobs
    rules = chart_rules(RULES, ns, tmp_path / "rules.yaml")
    process, prometheus = start_prometheus(tmp_path, jobs, rules)
    try:
        realkube.wait(lambda: ready(prometheus), timeout=60, what="Prometheus ready")
        fired = realkube.wait(lambda: prometheus.firing(ALERT), timeout=60,
                              what=f"{ALERT} to fire")
        assert [(a["kind"], a["resource"]) for a in fired] == [("JobSchedule", f"{ns}/bad")]
        assert prometheus.value(f'jobwarden_resource_ready{{resource="{ns}/good"}}') == 1

        realkube.kubectl("delete", "jobschedule", "bad", "good", "-n", ns)
        realkube.wait(lambda: f'resource="{ns}/' not in scrape() and
                      f'schedule="{ns}/' not in scrape(),
                      timeout=60, what="the deleted schedules' series removed")
        # The series gone, the alert resolves (it would page for ever on a stale series).
        realkube.wait(lambda: not prometheus.firing(ALERT), timeout=60,
                      what=f"{ALERT} resolved once the resource is gone")
        ever = {(r["metric"]["alertname"], r["metric"].get("resource")) for r in
                prometheus.query('max_over_time(ALERTS{alertstate="firing"}[30m])')}
        assert ever == {(ALERT, f"{ns}/bad")}, ever
    finally:
        process.terminate()
        process.wait(timeout=20)
