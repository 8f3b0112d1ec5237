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
import threading
from pathlib import Path

import pytest

from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import REPO, RealCluster, secret, worker_pool
from tests.cluster.promserver import (
    chart_rules,
    pod_targets,
    ready,
    reload,
    start_prometheus,
    write_config,
)

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

#: Pod-per-run panels (jobwarden_pod_runs_total, jobwarden_pod_run_*): this run has no pod
#: runs; #18's scenarios on the real cluster provoke them.
NOT_PROVOKED = ("jobwarden_pod_run",)


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
        # Every slot runs, however late (catchUp all): on a loaded machine a pass can come
        # seconds after a slot, and with the default (latest) the slots it passed count as
        # missed -- honestly, so JobwardenScheduleSlotsMissed fired here under load.
        "spec": {"interval": "2s", "catchUp": "all", "catchUpMax": 100,
                 "job": {"class": "tests.support.testjobs:Record"}}})

    ns = realkube.namespace
    jobs = pod_targets(realkube)
    assert jobs["operator"] and jobs["workers"], jobs
    rules_file = chart_rules(FAST_RULES, ns, tmp_path / "rules.yaml")
    stop = threading.Event()
    process, prometheus = start_prometheus(tmp_path, jobs, rules_file)
    try:
        realkube.wait(lambda: ready(prometheus), timeout=60, what="Prometheus ready")
        for _ in range(5):
            realkube.client.enqueue("tests.support.testjobs:Record", {})
        # A steady stream of failing jobs for the whole run (one burst from a class
        # Prometheus never saw is a series born at its final value: rate() is 0 and the
        # alert cannot fire; and the retry panels need retries on the live workers).

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
        pod_targets(realkube, jobs=jobs)
        write_config(tmp_path, jobs, rules_file)
        reload(prometheus)

        def empty_panels() -> list[str]:
            return [f"{title}: {expr}" for title, expr in panel_queries()
                    if not prometheus.query(expr)
                    and not any(m in expr for m in (*NOT_EXPORTED, *NOT_PROVOKED, *UNSCRAPED))]

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
        stop.set()  # the enqueuing thread must not outlive the test's client
        process.terminate()
        process.wait(timeout=20)
