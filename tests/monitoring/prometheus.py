"""A real Prometheus server on a loopback port, for tests that need its semantics.

Why a real one: the question "does this alert fire on the first event after a
process start" depends on how Prometheus treats a series' first sample
(``increase`` needs two), staleness and ``offset`` look-back -- things a PromQL
parser cannot answer. The Debian ``prometheus`` binary is started with a
generated config (1 s scrape and rule evaluation) and the rules handed in;
callers skip with one line when it is not installed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.ports import free_port
from tests.support.waiting import wait_for

BINARY = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


@dataclass
class Prometheus:
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (empty when nothing matches)."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(address, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, expr: str) -> float | None:
        """The value of a one-element result, None when the result is empty."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def firing(self, alert: str) -> list[dict[str, str]]:
        """Label sets of the firing alerts called ``alert``."""
        return [r["metric"] for r in
                self.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')]


def rules_file(groups: list[dict[str, Any]], path: Path) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


@contextlib.contextmanager
def running(workdir: Path, *, targets: list[str], rules: Path | None = None,
            interval: str = "1s") -> Iterator[Prometheus]:
    """Run Prometheus scraping ``targets`` (host:port, /metrics) until the block ends."""
    assert BINARY is not None
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": interval},
        "scrape_configs": [{"job_name": "jobwarden",
                            "static_configs": [{"targets": targets}]}],
    }
    if rules is not None:
        config["rule_files"] = [str(rules)]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [BINARY, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, (workdir / "prometheus.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for(ready, timeout=60, message="Prometheus ready")
        yield Prometheus(url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
