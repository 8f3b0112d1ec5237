"""A real Prometheus scrapes the operator and worker pods of a run on the real
control plane, with the chart's alert rules loaded: every Grafana panel's query
returns data (a rollout included, for the drain and rollout panels), the alert
the run provokes (failing jobs) fires, and the others stay silent.

Targets carry the labels the chart's PodMonitor/ServiceMonitor give them
(``namespace``, ``pod``, ``pool``, ``cluster``); the rules' windows and ``for``
durations are shortened through chart values only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobwarden.structs.states import JobStatus
from tests.chart.helmchart import manifests
from tests.cluster.conftest import REPO, RealCluster, secret, worker_pool
from tests.cluster.controlplane import free_port
from tests.monitoring.prometheus import Prometheus

pytestmark = [pytest.mark.realkube, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus missing (Debian package prometheus)")]

DASHBOARD = REPO / "charts" / "jobwarden" / "dashboards" / "jobwarden.json"
FAST_RULES = {"prometheusRule": {"enabled": True, "operatorJob": "operator", "rules": {
    "jobsFailing": {"window": "1m", "for": "0s", "minFailures": 2},
    "operatorDown": {"for": "0s"},
    "queueWaitHigh": {"for": "0s"}, "scheduleNoSuccess": {"for": "0s"}}}}


#: Counters the operator does not export before their first increment (none since #14:
#: jobwarden_operator_errors_total is exported at 0 for every kind from the start).
NOT_EXPORTED: tuple[str, ...] = ()


#: Observed by a worker just before it exits (its drain): a pull scrape rarely sees it,
#: so the panel is empty more often than not (finding for #14: the operator knows both
#: ends of a drain and could observe it instead).
UNSCRAPED = ("jobwarden_drain_duration_seconds_bucket",)


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) with the dashboard's variables set to 'everything'."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$__range", "5m")
            for variable in ("cluster", "namespace", "pool", "queue"):
                expr = expr.replace(f"${variable}", ".*")
            found.append((panel["title"], expr))
    return found


def write_config(workdir: Path, jobs: dict[str, list[tuple[str, dict[str, str]]]],
                 rules: Path) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [address], "labels": labels}
                                                 for address, labels in targets]}
            for job, targets in jobs.items()],
    }
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def reload(prometheus: Prometheus) -> None:
    request = urllib.request.Request(f"{prometheus.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def start_prometheus(workdir: Path, jobs: dict[str, list[tuple[str, dict[str, str]]]],
                     rules: Path) -> tuple[subprocess.Popen[bytes], Prometheus]:
    config = write_config(workdir, jobs, rules)
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(shutil.which("prometheus")), f"--config.file={config}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT)
    return process, Prometheus(f"http://127.0.0.1:{port}")


def test_prometheus_scrapes_the_run_panels_have_data_and_failing_jobs_alert(
        realkube: RealCluster, tmp_path: Path):
    realkube.install()
    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    realkube.api.create(worker_pool("workers", realkube.namespace, "db"))
    realkube.wait(lambda: ((realkube.api.get("workerpools", "workers", realkube.namespace)
                            or {}).get("status") or {}).get("readyReplicas") == 1,
                  timeout=120, what="a ready worker")
    realkube.kubectl.apply({
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "metadata": {"name": "tick", "namespace": realkube.namespace},
        "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Record"}}})

    ns = realkube.namespace
    jobs: dict[str, list[tuple[str, dict[str, str]]]] = {"operator": [], "workers": []}
    for pod in realkube.kubelet.pods.values():
        if pod.port is None:
            continue
        labels = {"namespace": ns, "pod": pod.name, "cluster": "default"}
        if pod.container == "operator":
            jobs["operator"].append((f"127.0.0.1:{pod.port}", labels))
        else:
            jobs["workers"].append((f"127.0.0.1:{pod.port}", {**labels, "pool": "workers"}))
    assert jobs["operator"] and jobs["workers"], jobs
    rules = next(d for d in manifests(FAST_RULES) if d["kind"] == "PrometheusRule")
    rules_file = tmp_path / "rules.yaml"
    # The chart renders release "jw" in namespace "jobs": point the rule at this run's.
    rules_file.write_text(yaml.safe_dump(rules["spec"]).replace('namespace="jobs"',
                                                                f'namespace="{ns}"'))
    process, prometheus = start_prometheus(tmp_path, jobs, rules_file)
    try:
        realkube.wait(lambda: _ready(prometheus), timeout=60, what="Prometheus ready")
        for _ in range(5):
            realkube.client.enqueue("tests.support.testjobs:Record", {})
        # A steady stream of failing jobs for the whole run (one burst from a class
        # Prometheus never saw is a series born at its final value: rate() is 0 and the
        # alert cannot fire; and the retry panels need retries on the live workers).
        stop = threading.Event()

        def failing() -> None:
            while not stop.is_set():
                realkube.client.enqueue("tests.support.testjobs:Boom", {})
                stop.wait(1.0)

        stream = threading.Thread(target=failing, daemon=True)
        stream.start()
        realkube.wait(lambda: prometheus.firing("JobwardenJobsFailing"), timeout=120,
                      what="JobwardenJobsFailing to fire")
        assert realkube.client.jobs(status=JobStatus.FAILED)
        # A rollout, so that the drain and rollout duration panels have something to show.
        realkube.kubectl("patch", "wp", "workers", "-n", ns, "--type=merge",
                         "-p", '{"spec": {"image": "example/jobs:2"}}')
        realkube.wait(lambda: ((realkube.api.get("workerpools", "workers", ns) or {})
                               .get("status") or {}).get("codeVersion") == "2"
                      and len(realkube.pods("jobwarden.io/pool=workers", alive=False)) == 1,
                      timeout=120, what="the rollout to finish")
        # The new worker pod is a new target.
        for pod in realkube.kubelet.pods.values():
            if pod.port is not None and pod.container != "operator" and not pod.removed:
                jobs["workers"].append((f"127.0.0.1:{pod.port}", {
                    "namespace": ns, "pod": pod.name, "cluster": "default", "pool": "workers"}))
        write_config(tmp_path, jobs, rules_file)
        reload(prometheus)

        def empty_panels() -> list[str]:
            return [f"{title}: {expr}" for title, expr in panel_queries()
                    if not prometheus.query(expr)
                    and not any(m in expr for m in (*NOT_EXPORTED, *UNSCRAPED))]

        try:
            realkube.wait(lambda: not empty_panels(), timeout=60, what="every panel's data")
        except AssertionError:
            raise AssertionError("panels without data:\n" + "\n".join(empty_panels())) from None
        # Zero-initialised (#14): the operator's error counter exists for every kind at 0.
        kinds = {r["metric"]["kind"] for r in
                 prometheus.query("jobwarden_operator_errors_total == 0")}
        assert {"JobSchedule", "ExclusiveJob", "WorkerPool"} <= kinds, kinds
        stop.set()
        stream.join(timeout=10)
        firing = {r["metric"]["alertname"] for r in
                  prometheus.query('ALERTS{alertstate="firing"}')}
        assert firing == {"JobwardenJobsFailing"}, firing
    finally:
        process.terminate()
        process.wait(timeout=20)


def _ready(prometheus: Prometheus) -> Any:
    try:
        up = prometheus.query("up")
        return up and all(r["value"][1] == "1" for r in up)
    except OSError:
        return False
