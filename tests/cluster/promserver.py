"""Debian's Prometheus scraping the pods of a run on the real control plane.

Targets are static (``127.0.0.1:<port>`` of each pod, as the process kubelet
runs them) and carry the labels the chart's PodMonitor/ServiceMonitor give
them (``namespace``, ``pod``, ``pool``, ``cluster``); the chart's rules are
rendered with their windows and ``for`` durations shortened through values only.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.chart.helmchart import manifests
from tests.cluster.conftest import RealCluster
from tests.monitoring.prometheus import Prometheus
from tests.support.ports import free_port

Targets = dict[str, list[tuple[str, dict[str, str]]]]


def write_config(workdir: Path, jobs: Targets, rules: Path) -> Path:
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


def start_prometheus(workdir: Path, jobs: Targets, rules: Path
                     ) -> tuple[subprocess.Popen[bytes], Prometheus]:
    config = write_config(workdir, jobs, rules)
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(shutil.which("prometheus")), f"--config.file={config}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT)
    return process, Prometheus(f"http://127.0.0.1:{port}")


def ready(prometheus: Prometheus) -> Any:
    """Every target up (False while Prometheus itself is still starting)."""
    try:
        up = prometheus.query("up")
        return up and all(r["value"][1] == "1" for r in up)
    except OSError:
        return False


def pod_targets(cluster: RealCluster, pool: str = "workers", jobs: Targets | None = None
                ) -> Targets:
    """The operator and worker pods the kubelet runs now, added to ``jobs``."""
    jobs = jobs if jobs is not None else {"operator": [], "workers": []}
    known = {address for targets in jobs.values() for address, _ in targets}
    for pod in list(cluster.kubelet.pods.values()):
        address = f"127.0.0.1:{pod.port}"
        if pod.port is None or pod.removed or address in known:
            continue
        labels = {"namespace": cluster.namespace, "pod": pod.name, "cluster": "default"}
        if pod.container == "operator":
            jobs["operator"].append((address, labels))
        else:
            jobs["workers"].append((address, {**labels, "pool": pool}))
    return jobs


def chart_rules(values: dict[str, Any], namespace: str, path: Path) -> Path:
    """The chart's PrometheusRule (rendered with ``values``) as a rules file for this run."""
    rules = next(d for d in manifests(values) if d["kind"] == "PrometheusRule")
    # The chart renders release "jw" in namespace "jobs": point the rule at this run's.
    path.write_text(yaml.safe_dump(rules["spec"]).replace('namespace="jobs"',
                                                          f'namespace="{namespace}"'))
    return path
