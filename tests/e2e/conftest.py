"""The cluster in a box: emulated API + PostgreSQL + `jobwarden operator` + a process kubelet.

``cluster`` gives a test everything a real deployment has, each piece real
except the API server: the operator is the `jobwarden operator` process (as the
chart runs it), every worker pod it creates becomes a `jobwarden worker`
process (tests/e2e/kubelet.py), and both talk to a fresh PostgreSQL database.
Timings are shortened through the environment only (the operator's pool pass
every 0.5 s, worker heartbeats every 0.3 s), never through code paths that
production does not take.
"""

from __future__ import annotations

import base64
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobwarden.api.client import Client
from jobwarden.controller.workerpools import spec as pools_spec
from tests.e2e import podrunscenarios
from tests.e2e.kubelet import ProcessKubelet
from tests.operator.conftest import OperatorProcess, start_operator
from tests.support.kube import KubeAPI
from tests.support.waiting import wait_for

__all__ = ["start_operator"]

NAMESPACE = "default"
SECRET = "jobwarden-dsn"
#: Worker timings of every test pool (through spec.env, as a user would set them).
WORKER_ENV = {
    "JOBWARDEN_POLL_INTERVAL": "0.1",
    "JOBWARDEN_HEARTBEAT_INTERVAL": "0.3",
    "JOBWARDEN_HEARTBEAT_GRACE": "8",
    "JOBWARDEN_REAP_INTERVAL": "0.5",
}
OPERATOR_ENV = {"JOBWARDEN_POOL_INTERVAL": "0.5", "JOBWARDEN_STATUS_INTERVAL": "0.5"}


def pool_manifest(name: str = "workers", *, replicas: int = 2, image: str = "example/jobs:1",
                  drain: int = 30, concurrency: int = 4, max_surge: int = 1,
                  max_unavailable: int = 0, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "WorkerPool",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"image": image, "replicas": replicas, "queues": ["default"],
                 "concurrency": concurrency, "apps": ["tests.support.testjobs"],
                 "dsnSecretRef": {"name": SECRET}, "drainTimeoutSeconds": drain,
                 "rollout": {"maxSurge": max_surge, "maxUnavailable": max_unavailable},
                 "env": [{"name": k, "value": v} for k, v in WORKER_ENV.items()], **spec},
    }


@dataclasses.dataclass
class Cluster:
    api: KubeAPI
    dsn: str
    client: Client
    kubelet: ProcessKubelet
    operators: list[OperatorProcess]
    start: Callable[..., OperatorProcess]

    @property
    def operator(self) -> OperatorProcess:
        return self.operators[-1]

    @property
    def site(self) -> podrunscenarios.Site:
        """This cluster as the pod-run scenarios see it (tests/e2e/podrunscenarios.py)."""
        return podrunscenarios.Site(
            api=self.api, kubelet=self.kubelet, client=self.client, dsn=self.dsn,
            namespace=NAMESPACE, secret=SECRET, wait=self.wait,
            operator_ports=lambda: [o.port for o in self.operators if o.proc.poll() is None])

    def restart_operator(self) -> OperatorProcess:
        self.operator.stop()
        self.operators.append(self.start(self.api, **OPERATOR_ENV))
        return self.operator

    # pools and pods
    def apply_pool(self, name: str = "workers", **options: Any) -> dict[str, Any]:
        return self.api.create(pool_manifest(name, **options))

    def patch_pool(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.api.patch("workerpools", name, {"spec": spec}, NAMESPACE)

    def pool(self, name: str = "workers") -> dict[str, Any]:
        found = self.api.get("workerpools", name, NAMESPACE)
        assert found is not None
        return found

    def pods(self, pool: str = "workers", *, alive: bool = True) -> list[dict[str, Any]]:
        pods = self.api.list("pods", NAMESPACE, labels=f"{pools_spec.POOL_LABEL}={pool}")
        if alive:
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return pods

    def ready_pods(self, pool: str = "workers") -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.pods(pool)
                      if any(c.get("type") == "Ready" and c.get("status") == "True"
                             for c in (p.get("status") or {}).get("conditions") or [])
                      and not p["metadata"].get("annotations", {}).get(
                          pools_spec.DRAIN_STARTED_ANNOTATION))

    def wait(self, probe: Callable[[], Any], *, timeout: float = 60.0,
             what: str = "a condition") -> Any:
        """Poll ``probe`` until truthy (database and API state both count)."""
        return wait_for(probe, timeout=timeout, interval=0.1, message=what,
                        check=self._kubelet_ok, context=lambda: self.kubelet.report(1500))

    def _kubelet_ok(self) -> None:
        if self.kubelet.errors:
            raise AssertionError(f"kubelet failed: {self.kubelet.errors}")

    def settled(self, pool: str = "workers", *, replicas: int,
                version: str | None = None) -> bool:
        status = self.pool(pool).get("status") or {}
        progressing = next((c for c in status.get("conditions") or []
                            if c.get("type") == "Progressing"), {})
        pods = self.pods(pool, alive=False)  # terminating pods too: settled = gone
        return (progressing.get("reason") == "Complete"
                and status.get("readyReplicas") == replicas
                and status.get("updatedReplicas") == replicas
                and len(pods) == replicas and len(self.ready_pods(pool)) == replicas
                and (version is None or status.get("codeVersion") == version))


def host_observation(client: Client) -> Callable[[str], dict[str, Any]]:
    """What the host registry says about a host, for the kubelet's deletion records."""

    def observe(host: str) -> dict[str, Any]:
        found = client.hosts.status(host=host)
        running = client.hosts.running([host]).get(host, 0)
        return {"registered": bool(found), "draining": bool(found and found[0].draining),
                "running": running}

    return observe


@pytest.fixture
def cluster(kube_api: KubeAPI, dsn: str, client: Client, tmp_path: Path,
            start_operator: Callable[..., OperatorProcess]) -> Iterator[Cluster]:
    kube_api.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": SECRET, "namespace": NAMESPACE},
                     "data": {"dsn": base64.b64encode(dsn.encode()).decode()}})
    kubelet = ProcessKubelet(kube_api, workdir=tmp_path / "kubelet", namespace=NAMESPACE,
                             extra_env={"JOBWARDEN_TEST_AUDIT_DSN": dsn},
                             observe=host_observation(client)).start()
    operators = [start_operator(kube_api, **OPERATOR_ENV)]
    box = Cluster(api=kube_api, dsn=dsn, client=client, kubelet=kubelet, operators=operators,
                  start=start_operator)
    try:
        yield box
    finally:
        for operator in operators:
            operator.stop()
        kubelet.stop()
        print(kubelet.report())


class Load:
    """Steady load: short jobs every ``short_every`` s, long ones every ``long_every`` s."""

    def __init__(self, client: Client, *, short_every: float = 0.1, long_every: float = 1.0,
                 long_seconds: float = 2.0) -> None:
        self.client = client
        self.short_every, self.long_every, self.long_seconds = \
            short_every, long_every, long_seconds
        self.ids: dict[str, list[int]] = {"short": [], "long": [], "long_once": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        last_long = 0.0
        toggle = False
        while not self._stop.is_set():
            try:
                self.ids["short"].append(self.client.enqueue("tests.support.testjobs:Record",
                                                             {}).id)
                if time.monotonic() - last_long >= self.long_every:
                    last_long = time.monotonic()
                    toggle = not toggle
                    kind = "long_once" if toggle else "long"
                    path = ("tests.support.testjobs:SleepyOnce" if toggle
                            else "tests.support.testjobs:Sleepy")
                    self.ids[kind].append(self.client.enqueue(
                        path, {"seconds": self.long_seconds}).id)
            except Exception as exc:
                self.errors.append(repr(exc))
            self._stop.wait(self.short_every)

    def all_ids(self) -> list[int]:
        return [i for ids in self.ids.values() for i in ids]
