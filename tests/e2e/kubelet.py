"""A process kubelet: every Pod in the emulated API becomes a real local process.

The emulated API keeps pods ``Pending`` forever (there is no node). This
kubelet gives the worker pods the operator creates a life, close enough to a
real node for drain-first rollouts to be tested end to end:

* a new pod gets the kubelet's finalizer (so a delete is graceful, as on a real
  node: the pod stays ``Terminating`` until its process is gone), its
  environment resolved from the pod spec (``value``, ``secretKeyRef``,
  ``configMapKeyRef``, downward-API ``fieldRef``), its Secret volumes written to
  a directory (paths under a mount in the environment are rewritten to point
  there), a free port instead of ``JOBWARDEN_HTTP_PORT`` (every worker listens
  on 127.0.0.1), and its container's command started (``jobwarden`` runs as
  ``python -m jobwarden`` of this interpreter, with the repository on
  ``PYTHONPATH`` so the test job modules import);
* the status subresource says ``Running``; ``Ready`` follows the worker's
  ``/readyz``;
* a process that exits on its own marks the pod ``Failed`` (or ``Succeeded``
  for exit 0) -- a container restart policy is not emulated, the owner replaces
  the pod;
* a deleted pod (``deletionTimestamp``, or gone) gets SIGTERM, then SIGKILL
  after its grace period (``deletionGracePeriodSeconds`` when positive, else
  ``terminationGracePeriodSeconds``), and once the process is gone the
  finalizer is removed so the pod disappears.

Each deletion is recorded (:class:`Deletion`), with whatever ``observe(pod
name)`` returned at the moment the kubelet saw it: the tests use that to prove a
host was drained and idle *before* its pod was killed.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.kube import KubeAPI

logger = logging.getLogger("tests.e2e.kubelet")

REPO = Path(__file__).resolve().parents[2]
FINALIZER = "e2e.jobwarden.io/process-kubelet"
#: Variables of the test runner that must not leak into a pod's process.
SCRUBBED = ("JOBWARDEN_", "KUBECONFIG", "POD_NAME", "PYTEST_")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass
class PodProcess:
    name: str
    proc: subprocess.Popen[bytes]
    port: int | None
    log: Path
    env: dict[str, str]
    started_at: float
    ready: bool = False
    phase: str = "Running"
    term_at: float | None = None
    grace: float = 30.0
    killed: bool = False
    removed: bool = False

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@dataclasses.dataclass
class Deletion:
    pod: str
    seen_at: float
    #: ``observe(pod)`` at the moment the kubelet saw the deletion (before SIGTERM).
    observed: Any
    annotations: dict[str, str]
    exited_at: float | None = None
    killed: bool = False
    exit_code: int | None = None


class ProcessKubelet:
    def __init__(self, api: KubeAPI, *, workdir: Path, namespace: str = "default",
                 extra_env: dict[str, str] | None = None,
                 observe: Callable[[str], Any] | None = None, interval: float = 0.15) -> None:
        self.api = api
        self.workdir = workdir
        self.namespace = namespace
        self.extra_env = dict(extra_env or {})
        self.observe = observe
        self.interval = interval
        self.pods: dict[str, PodProcess] = {}
        self.deletions: list[Deletion] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, grace: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            procs = [p for p in self.pods.values() if p.proc.poll() is None]
        for pod in procs:
            with contextlib.suppress(ProcessLookupError):
                pod.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for pod in procs:
            try:
                pod.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pod.proc.kill()
                pod.proc.wait(timeout=10)

    # -- queries for tests -----------------------------------------------------------------

    def process(self, pod: str) -> PodProcess:
        with self._lock:
            return self.pods[pod]

    def kill(self, pod: str, sig: int = signal.SIGKILL) -> None:
        os.kill(self.process(pod).proc.pid, sig)

    def deletion(self, pod: str) -> Deletion | None:
        with self._lock:
            return next((d for d in self.deletions if d.pod == pod), None)

    def report(self, tail: int = 3000) -> str:
        with self._lock:
            pods = list(self.pods.values())
        parts = [f"kubelet errors: {self.errors}"] if self.errors else []
        for pod in pods:
            parts.append(f"----- pod {pod.name} (exit {pod.proc.poll()}, killed {pod.killed})\n"
                         f"{pod.logs()[-tail:]}")
        return "\n".join(parts)

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as exc:  # keep the node alive; the test sees it in errors
                if not self._stop.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    logger.exception("kubelet pass failed")
            self._stop.wait(self.interval)

    def _sync(self) -> None:
        listed = {p["metadata"]["name"]: p for p in self.api.list("pods", self.namespace)}
        for name, pod in listed.items():
            meta = pod["metadata"]
            known = self.pods.get(name)
            if meta.get("deletionTimestamp"):
                if known is None:
                    self._remove_finalizer(pod)
                else:
                    self._terminate(known, pod)
            elif known is None:
                if (pod.get("status") or {}).get("phase") in (None, "Pending"):
                    self._start(pod)
            else:
                self._observe(known)
        for name, known in list(self.pods.items()):
            if name not in listed and not known.removed:
                self._terminate(known, None)

    # -- pod start -------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        self.api.patch("pods", name, {"metadata": {"finalizers": [*finalizers, FINALIZER]}},
                       self.namespace)
        spec = pod["spec"]
        containers = spec.get("containers") or []
        container = next((c for c in containers if c.get("name") == "worker"), containers[0])
        podroot = self.workdir / name
        podroot.mkdir(parents=True, exist_ok=True)
        mounts = self._mount_volumes(spec, container, podroot)
        env = self._resolve_env(pod, container)
        for key, value in list(env.items()):
            for mount_path, local in mounts.items():
                if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                    env[key] = str(local) + value[len(mount_path.rstrip("/")):]
        port: int | None = None
        if "JOBWARDEN_HTTP_PORT" in env:
            port = free_port()
            env["JOBWARDEN_HTTP_PORT"] = str(port)
        command = [*(container.get("command") or ["jobwarden"]), *(container.get("args") or [])]
        if command[0] == "jobwarden":
            command = [sys.executable, "-m", "jobwarden", *command[1:]]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
        full_env.update(env)
        full_env.update({"PYTHONPATH": str(REPO), **self.extra_env})
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as handle:
            proc = subprocess.Popen(command, env=full_env, cwd=REPO, stdout=handle,
                                    stderr=subprocess.STDOUT)
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        record = PodProcess(name=name, proc=proc, port=port, log=log, env=env,
                            started_at=time.monotonic(), grace=grace)
        with self._lock:
            self.pods[name] = record
        self._set_status(record)

    def _mount_volumes(self, spec: dict[str, Any], container: dict[str, Any],
                       podroot: Path) -> dict[str, Path]:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                continue
            local = podroot / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                source = volume["secret"]
                secret = self.api.get("secrets", source["secretName"], self.namespace)
                if secret is None:
                    raise RuntimeError(f"secret {source['secretName']} not found")
                data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
                data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
                items = source.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    (local / item["path"]).write_bytes(data[item["key"]])
            mounts[mount["mountPath"]] = local
        return mounts

    def _resolve_env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
                continue
            source = entry.get("valueFrom") or {}
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[entry["name"]] = {"metadata.name": pod["metadata"]["name"],
                                      "metadata.namespace": self.namespace,
                                      "status.podIP": "127.0.0.1"}.get(path, "")
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.api.get("secrets", ref["name"], self.namespace) or {}
                env[entry["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                config = self.api.get("configmaps", ref["name"], self.namespace) or {}
                env[entry["name"]] = str(config["data"][ref["key"]])
        return env

    # -- status ----------------------------------------------------------------------------

    def _probe(self, pod: PodProcess) -> bool:
        if pod.port is None:
            return pod.proc.poll() is None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{pod.port}/readyz",
                                        timeout=1) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _observe(self, pod: PodProcess) -> None:
        if pod.phase != "Running":
            return
        code = pod.proc.poll()
        if code is not None:
            pod.phase, pod.ready = ("Succeeded" if code == 0 else "Failed"), False
            self._set_status(pod, exit_code=code)
            return
        ready = self._probe(pod)
        if ready != pod.ready:
            pod.ready = ready
            self._set_status(pod)

    def _set_status(self, pod: PodProcess, *, exit_code: int | None = None) -> None:
        ready = "True" if pod.ready else "False"
        state: dict[str, Any] = ({"running": {}} if exit_code is None
                                 else {"terminated": {"exitCode": exit_code}})
        status = {"phase": pod.phase, "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                  "conditions": [{"type": "Ready", "status": ready},
                                 {"type": "ContainersReady", "status": ready}],
                  "containerStatuses": [{"name": "worker", "ready": pod.ready,
                                         "restartCount": 0, "state": state}]}
        with contextlib.suppress(Exception):  # the pod may be gone already
            self.api.patch("pods", pod.name, {"status": status}, self.namespace,
                           subresource="status")

    # -- deletion --------------------------------------------------------------------------

    def _terminate(self, pod: PodProcess, manifest: dict[str, Any] | None) -> None:
        now = time.monotonic()
        if pod.term_at is None:
            pod.term_at = now
            observed = self.observe(pod.name) if self.observe is not None else None
            annotations = dict(((manifest or {}).get("metadata") or {}).get("annotations") or {})
            with self._lock:
                self.deletions.append(Deletion(pod=pod.name, seen_at=time.time(),
                                               observed=observed, annotations=annotations))
            seconds = ((manifest or {}).get("metadata") or {}).get("deletionGracePeriodSeconds")
            if seconds:
                pod.grace = float(seconds)
            if pod.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    pod.proc.send_signal(signal.SIGTERM)
        code = pod.proc.poll()
        if code is None and now - pod.term_at >= pod.grace:
            pod.proc.kill()
            pod.killed = True
            code = pod.proc.wait(timeout=10)
        if code is None:
            return
        record = self.deletion(pod.name)
        if record is not None and record.exited_at is None:
            record.exited_at, record.killed, record.exit_code = time.time(), pod.killed, code
        if manifest is not None:
            self._remove_finalizer(manifest)
        pod.removed = True

    def _remove_finalizer(self, manifest: dict[str, Any]) -> None:
        meta = manifest["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers:
            finalizers.remove(FINALIZER)
            with contextlib.suppress(Exception):
                self.api.patch("pods", meta["name"], {"metadata": {"finalizers": finalizers}},
                               self.namespace)
