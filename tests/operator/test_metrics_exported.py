"""Every metric a dashboard panel or an alert rule uses is really exported.

The chart tests check the dashboard and rules against the documented catalog
(metrics.py's docstring); this one closes the loop against running processes:
a real `jobwarden worker` and a real `jobwarden operator` are scraped, and every
`jobwarden_*` series named in the dashboard JSON or the PrometheusRule template
must appear in one of the two scrapes.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.kube import KubeAPI
from tests.support.ports import free_port
from tests.support.waiting import wait_for

CHART = Path(__file__).resolve().parents[2] / "charts" / "jobwarden"
SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def _families(body: str) -> set[str]:
    return {line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")}


def _series_used() -> set[str]:
    text = (CHART / "dashboards" / "jobwarden.json").read_text()
    text += (CHART / "templates" / "prometheusrule.yaml").read_text()
    return set(re.findall(r"\bjobwarden_[a-z0-9_]+", text))


def _family_of(series: str) -> str:
    for suffix in SUFFIXES:
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def test_every_metric_the_dashboard_and_alerts_use_is_exported(
        kube_api: KubeAPI, start_operator: Callable[..., object],
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    port = free_port()
    spawn_worker("--host", "scraped", "--http-port", str(port))
    operator = start_operator(kube_api)

    def scrape(url: str) -> str:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return ""

    worker_body = wait_for(lambda: scrape(f"http://127.0.0.1:{port}/metrics"), timeout=30,
                           message="the worker's /metrics")
    operator_body = scrape(f"http://127.0.0.1:{operator.port}/metrics")  # type: ignore[attr-defined]
    exported = _families(worker_body) | _families(operator_body)
    used = _series_used()
    assert len(used) > 20  # the scan found the dashboard and the rules
    missing = sorted(s for s in used if s not in exported and _family_of(s) not in exported)
    assert missing == []


def test_the_operator_exports_its_error_counter_at_zero_for_every_kind_from_the_start(
        kube_api: KubeAPI, start_operator: Callable[..., object]) -> None:
    operator: Any = start_operator(kube_api)
    for kind in ("JobSchedule", "ExclusiveJob", "WorkerPool"):
        assert operator.metric("jobwarden_operator_errors_total", kind=kind) == 0.0, kind


def test_the_worker_and_the_operator_export_the_release_they_run(
        kube_api: KubeAPI, start_operator: Callable[..., object],
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    """``jobwarden_build_info{version}`` is 1 in each process (docs/upgrades.md)."""
    from jobwarden.version import VERSION

    port = free_port()
    spawn_worker("--host", "scraped", "--http-port", str(port))
    operator: Any = start_operator(kube_api)
    assert operator.metric("jobwarden_build_info", version=VERSION) == 1.0

    def worker_line() -> list[str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as body:
                text = body.read().decode()
        except OSError:
            return []
        return [line for line in text.splitlines() if line.startswith("jobwarden_build_info")]

    assert wait_for(worker_line, timeout=30, message="the worker's /metrics") == [
        f'jobwarden_build_info{{version="{VERSION}"}} 1.0']
