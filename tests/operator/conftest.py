"""Fixtures for the operator tests: the emulated API, and `jobwarden operator` for real.

The operator runs as the chart runs it: a `jobwarden operator` process
configured only by environment variables (DSN from a file, JSON logs), pointed
at the emulated API's kubeconfig, with short intervals so that a test takes
seconds. Its log is kept per process and printed at teardown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import KubeAPI
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]

#: Short intervals: status every 0.3 s, schedules every 0.2 s.
FAST_ENV = {
    "JOBWARDEN_STATUS_INTERVAL": "0.3",
    "JOBWARDEN_SCHEDULE_CHECK_SECONDS": "0.2",
    "JOBWARDEN_REAP_INTERVAL": "0.5",
    "JOBWARDEN_GAUGE_INTERVAL": "0.3",
    "JOBWARDEN_LOOP_LEASE_SECONDS": "3",
}


@dataclasses.dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def get(self, path: str) -> tuple[int, str]:
        try:
            # A hang bound: a full run kept an operator's /metrics unanswered for over 5 s
            # (two cores, load ~25).
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample's value from /metrics (None when absent)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                return float(value)
        return None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@pytest.fixture
def start_operator(dsn: str, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """``start(api, cluster="default", **env)`` -> a ready `jobwarden operator` process."""
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(dsn + "\n")
    started: list[OperatorProcess] = []

    def start(api: KubeAPI, *, cluster: str = "default", wait_ready: bool = True,
              **env: str) -> OperatorProcess:
        port = free_port()
        index = len(started)
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ("JOBWARDEN_DSN", "KUBECONFIG")}
        full_env.update({
            "KUBECONFIG": str(api.kubeconfig), "JOBWARDEN_DSN_FILE": str(dsn_file),
            "JOBWARDEN_HTTP_PORT": str(port), "JOBWARDEN_CLUSTER": cluster,
            "JOBWARDEN_POD_NAME": f"jobwarden-operator-{cluster}-{index}",
            "JOBWARDEN_LOG_FORMAT": "json", "JOBWARDEN_LOG_LEVEL": "info",
            "PYTHONPATH": str(REPO), **FAST_ENV, **env,
        })
        log = tmp_path / f"operator-{index}.log"
        with open(log, "wb") as handle:
            proc = subprocess.Popen([sys.executable, "-m", "jobwarden", "operator"],
                                    env=full_env, cwd=REPO, stdout=handle,
                                    stderr=subprocess.STDOUT)
        operator = OperatorProcess(proc=proc, port=port, log=log)
        started.append(operator)
        if wait_ready:
            # kopf's start is slow on a loaded machine: 60 s was missed at load 30-47
            # (the import alone took 34 s of wall for 0.9 s of CPU).
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"operator exited {proc.returncode}:\n"
                                         f"{operator.logs()[-3000:]}")
                with contextlib.suppress(OSError):
                    if operator.get("/readyz")[0] == 200:
                        break
                if time.monotonic() > deadline:
                    raise AssertionError(f"operator not ready:\n{operator.logs()[-3000:]}")
                time.sleep(0.05)
        return operator

    yield start
    for operator in started:
        operator.stop()
    for operator in started:
        print(f"----- {operator.log.name}\n{operator.logs()[-6000:]}")


def log_lines(operator: OperatorProcess) -> list[dict[str, object]]:
    lines = []
    for line in operator.logs().splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    return lines


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The object's status condition of type ``kind`` ({} when it has none)."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


def quiet_schedule(name: str) -> dict[str, Any]:
    """A JobSchedule in ``default`` whose daily slot (03:00 UTC) does not fire while a
    test runs: what it costs is its writes and passes, never its jobs."""
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedule": "0 3 * * *",
                     "job": {"class": "tests.support.testjobs:Noop", "data": {"n": name}}}}
