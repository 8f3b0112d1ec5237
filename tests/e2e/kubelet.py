"""A process kubelet: every Pod becomes a real local process.

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

On a real API server (``node=...``, tests/cluster) it behaves as a node's
kubelet instead: it registers its Node, binds the unscheduled pods to itself
(there is no scheduler), takes the pods bound to it in every namespace,
materialises ConfigMap, emptyDir and projected ServiceAccount volumes (the
token comes from the TokenRequest API, bound to the pod, and a kubeconfig
built from it is the process's ``KUBECONFIG``: the pod talks to the API server
with exactly its ServiceAccount's RBAC), sets ``KUBERNETES_SERVICE_HOST``/
``KUBERNETES_SERVICE_PORT`` (and the ``KUBERNETES_PORT*`` family) to the API
server as every kubelet does, runs the process as the pod's
``runAsUser``/``runAsGroup``/``fsGroup`` (tests/e2e/podruntime.py), follows the
container's startup/readiness/liveness probes (``httpGet``, ``tcpSocket``,
``exec``; a failed liveness or startup probe restarts the process), restarts
exited containers per ``restartPolicy`` with a back-off, reports status the
way a kubelet does (conditions, container statuses, restart counts) and
finishes a graceful deletion itself (delete with grace period 0 once the
process is gone) rather than through a finalizer.

What a node reports when a container ends or cannot start (node mode), so that
pod-per-run tests can provoke every failure cause:

===============================================  =============================================
situation                                        pod status (and Event)
===============================================  =============================================
process exits 0 / non-zero                       container ``terminated``: ``exitCode``,
                                                 ``reason`` ``Completed``/``Error``,
                                                 ``startedAt``, ``finishedAt``, ``containerID``;
                                                 a signal N is exit 128+N. ``restartPolicy:
                                                 Never`` (or ``OnFailure`` and exit 0): phase
                                                 ``Succeeded``/``Failed``; else the container
                                                 restarts (``CrashLoopBackOff`` while waiting,
                                                 the exit in ``lastState.terminated``)
``resources.limits.memory`` exceeded (RSS of     SIGKILL; ``terminated`` with ``reason:
the process tree, sampled every pass)            OOMKilled``, ``exitCode: 137``
image whose registry host ends in ``.invalid``   phase ``Pending``, ``waiting`` reason
(or listed in ``Images(failures=...)``)          ``ErrImagePull``, then ``ImagePullBackOff``
                                                 while backing off; Event ``Failed``
env from a missing Secret/ConfigMap or key;      ``Pending``, ``waiting``
``runAsNonRoot`` with uid 0                      ``CreateContainerConfigError`` with the
                                                 kubelet's message; Event ``Failed``
a volume's Secret/ConfigMap missing              ``Pending``, ``waiting`` ``ContainerCreating``;
                                                 Event ``FailedMount``; retried
``terminationMessagePolicy:                      a non-zero exit's ``terminated.message`` is the
FallbackToLogsOnError``                          tail of the container's output (its last 80
                                                 lines or 2 KiB, whichever is smaller), as a
                                                 kubelet fills it when the message file is
                                                 empty (the file itself is not emulated)
command not found / not executable               ``terminated`` ``StartError``, exit 128, then
                                                 as any exit (``Never``: phase ``Failed``)
``activeDeadlineSeconds`` passed                 the process is stopped (grace period), phase
                                                 ``Failed``, ``reason: DeadlineExceeded``
emptyDirs over ``limits.ephemeral-storage``, or   evicted: SIGKILL (grace 0, as the eviction
one over its ``sizeLimit`` (``du`` every pass)    manager does for a limit), phase ``Failed``,
                                                 ``reason: Evicted`` with the kubelet's message,
                                                 condition ``DisruptionTarget``
                                                 (``TerminationByKubelet``); Event ``Evicted``
===============================================  =============================================

Several nodes (node mode): ``labels`` and ``taints`` are the Node's, and a pod is
bound here only when its ``nodeSelector`` matches and it tolerates the taints;
``heartbeat`` renews the node's Lease and Ready condition that often; ``lose()``
is the node dying (heartbeats stop, processes SIGKILLed, nothing reported again).

Retries of a pod that cannot start back off 1 s, doubling, capped at 10 s (a
kubelet caps at 5 min). Memory is sampled, not enforced at allocation: a
process may overshoot its limit for up to one pass before it is killed.

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
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.e2e import clusterdns
from tests.e2e import podruntime as rt
from tests.e2e.kubeletserver import KubeletServer
from tests.support.ports import free_port

logger = logging.getLogger("tests.e2e.kubelet")

REPO = Path(__file__).resolve().parents[2]
FINALIZER = "e2e.jobwarden.io/process-kubelet"
#: Variables of the test runner that must not leak into a pod's process.
SCRUBBED = ("JOBWARDEN_", "KUBECONFIG", "KUBERNETES_", "POD_NAME", "PYTEST_")
#: Image mode: where the repository (the test job modules) is bound in a container.
IMAGE_REPO = "/opt/jobwarden-tests"
#: Where a pod finds its ServiceAccount token (the projected kube-api-access volume).
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _tolerates(toleration: dict[str, Any], taint: dict[str, str]) -> bool:
    """Does ``toleration`` tolerate ``taint`` (core/v1 semantics: Exists or Equal)?"""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(toleration.get("value", "") == taint.get("value", ""))


#: What a kubelet keeps of a container's output as its termination message.
TERMINATION_MESSAGE_BYTES = 2048
TERMINATION_MESSAGE_LINES = 80
#: Back-off of a pod that cannot start (and of container restarts): first, cap (seconds).
BACKOFF = (1.0, 10.0)


def _ports(container: dict[str, Any], env: dict[str, str]) -> tuple[int | None, dict[str, int]]:
    """The container's ports on this node: (the HTTP port, every port by number and name).

    Every pod shares 127.0.0.1, so the port ``JOBWARDEN_HTTP_PORT`` names is moved to a free
    one (``env`` is rewritten to it) and its declared number and name map there; other
    declared ports are used as they are (probes find them by number or name).
    """
    port: int | None = None
    ports: dict[str, int] = {}
    if "JOBWARDEN_HTTP_PORT" in env:
        port = free_port()
        for declared in container.get("ports") or []:
            if str(declared.get("containerPort")) == env["JOBWARDEN_HTTP_PORT"]:
                ports[str(declared["containerPort"])] = port
                if declared.get("name"):
                    ports[declared["name"]] = port
        ports[env["JOBWARDEN_HTTP_PORT"]] = port
        env["JOBWARDEN_HTTP_PORT"] = str(port)
    for declared in container.get("ports") or []:
        number = int(declared["containerPort"])
        ports.setdefault(str(number), number)
        if declared.get("name"):
            ports.setdefault(declared["name"], ports[str(number)])
    return port, ports


class Missing(LookupError):
    """A Secret, ConfigMap or key a pod refers to does not exist (the kubelet's message)."""


@dataclasses.dataclass
class Waiting:
    """A pod the kubelet could not start yet: when to try again, and what it reported."""

    first: float
    next_try: float
    attempts: int = 0
    restarts: int = 0
    last_terminated: dict[str, Any] | None = None
    given_up: bool = False


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
    namespace: str = "default"
    uid: str = ""
    container: str = "worker"
    image: str = ""
    command: list[str] = dataclasses.field(default_factory=list)
    full_env: dict[str, str] = dataclasses.field(default_factory=dict)
    #: containerPort (number and name) -> the local port the process really listens on.
    ports: dict[str, int] = dataclasses.field(default_factory=dict)
    readiness: dict[str, Any] | None = None
    liveness: dict[str, Any] | None = None
    restart_policy: str = "Never"
    restarts: int = 0
    liveness_failures: int = 0
    last_liveness: float = 0.0
    restart_at: float | None = None
    last_exit: int | None = None
    start_time: str = ""
    container_started: str = ""
    startup: dict[str, Any] | None = None
    started: bool = True
    last_startup: float = 0.0
    startup_failures: int = 0
    prefix: list[str] = dataclasses.field(default_factory=list)
    #: Host mode: the working directory (the repository, or an image's Code.source).
    cwd: Path = REPO
    memory_limit: int | None = None
    oom: bool = False
    #: The container's last termination (``lastState.terminated`` after a restart).
    last_terminated: dict[str, Any] | None = None
    #: ``terminated`` of the current container once it has ended for good.
    terminated: dict[str, Any] | None = None
    deadline: float | None = None
    #: Image mode: the image root filesystem the process is chrooted into.
    root: Path | None = None
    reason: str | None = None
    message: str | None = None
    #: Node mode: the container's emptyDirs and ``limits.ephemeral-storage`` (eviction).
    scratch: list[rt.Scratch] = dataclasses.field(default_factory=list)
    storage_limit: int | None = None
    storage_text: str = ""
    #: Pod conditions besides the four a kubelet always writes (``DisruptionTarget``).
    conditions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The container's ``terminationMessagePolicy``, and where this run's output begins.
    termination_policy: str = "File"
    log_start: int = 0

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def termination_message(self) -> str:
        """FallbackToLogsOnError: this run's output, its last 80 lines or 2 KiB (a kubelet's
        limits), whichever is smaller."""
        with open(self.log, "rb") as handle:
            handle.seek(self.log_start)
            tail = handle.read()[-TERMINATION_MESSAGE_BYTES:]
        lines = tail.decode(errors="replace").splitlines()[-TERMINATION_MESSAGE_LINES:]
        return "\n".join(lines)


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
    """See the module docstring. ``node`` set: a real node on a real API server."""

    def __init__(self, api: Any, *, workdir: Path, namespace: str | None = "default",
                 extra_env: dict[str, str] | None = None,
                 observe: Callable[[str], Any] | None = None, interval: float = 0.15,
                 node: str | None = None, server: str | None = None,
                 ca_file: Path | None = None, images: rt.Images | None = None,
                 labels: dict[str, str] | None = None,
                 taints: list[dict[str, str]] | None = None,
                 heartbeat: float | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.api = api
        self.workdir = workdir
        #: None: every namespace (node mode).
        self.namespace = namespace
        self.extra_env = dict(extra_env or {})
        self.observe = observe
        self.interval = interval
        self.node = node
        self.server = server
        self.ca_file = ca_file
        self.images = images or rt.Images()
        #: Node mode: the Node's own labels and taints; a pod is bound here only when its
        #: nodeSelector matches the labels and it tolerates the taints (a scheduler's two
        #: filters), so several nodes can share a namespace without racing for its pods.
        self.labels = dict(labels or {})
        self.taints = list(taints or [])
        #: Node mode: renew the node's Lease (kube-node-lease) and its Ready condition's
        #: ``lastHeartbeatTime`` this often, as a kubelet does; None: register only.
        self.heartbeat = heartbeat
        #: Node mode: the serving certificate and key of the HTTPS endpoint the API server
        #: proxies ``kubectl logs`` to (tests/e2e/kubeletserver.py); clients must show a
        #: certificate of ``ca_file``. None: no endpoint (``kubectl logs`` fails).
        self.tls = tls
        self.server_endpoint: KubeletServer | None = None
        #: Node mode: the Services table the pods resolve names with (tests/e2e/clusterdns.py).
        self.services_table = workdir / "cluster-dns" / "services.json"
        self._services_at = 0.0
        self._beating = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._pods: dict[str, PodProcess] = {}
        self.deletions: list[Deletion] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._waiting: dict[str, Waiting] = {}

    @property
    def pods(self) -> dict[str, PodProcess]:
        """Every pod this kubelet ran, by name: a copy, taken under the lock -- the
        kubelet's thread adds pods while a test iterates (a test that iterated the live
        dict, reading each pod's log, failed with "dictionary changed size during
        iteration" in a full run)."""
        with self._lock:
            return dict(self._pods)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.node is not None and self.tls is not None and self.ca_file is not None:
            self.server_endpoint = KubeletServer(
                self._container_log, cert=self.tls[0], key=self.tls[1],
                client_ca=self.ca_file).start()
        if self.node is not None:
            self._register_node()
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self._thread.start()
        if self.node is not None and self.heartbeat is not None:
            self._beating.set()
            self._beat_thread = threading.Thread(target=self._beat, name="node-heartbeat",
                                                 daemon=True)
            self._beat_thread.start()
        return self

    def lose(self) -> None:
        """The node dies: its heartbeats stop, its kubelet stops talking to the API server,
        and its processes are killed (SIGKILL) -- nothing reports anything any more. What
        the control plane makes of it is its own (the node lifecycle controller marks the
        Node Unknown and taints it; the pods' tolerations decide when they are deleted)."""
        for pod in self._halt():
            with contextlib.suppress(ProcessLookupError):
                pod.proc.kill()
            pod.killed = True
            pod.proc.wait(timeout=10)

    def stop(self, *, grace: float = 5.0) -> None:
        procs = self._halt()
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

    def _halt(self) -> list[PodProcess]:
        """Stop the kubelet's loops and heartbeats; the pod processes still running."""
        self._beating.clear()
        self._stop.set()
        for thread in (self._beat_thread, self._thread):
            if thread is not None:
                thread.join(timeout=30)
        endpoint, self.server_endpoint = self.server_endpoint, None
        if endpoint is not None:
            endpoint.stop()
        with self._lock:
            return [p for p in self._pods.values() if p.proc.poll() is None]

    # -- queries for tests -----------------------------------------------------------------

    def process(self, pod: str) -> PodProcess:
        with self._lock:
            return self._pods[pod]

    def kill(self, pod: str, sig: int = signal.SIGKILL) -> None:
        os.kill(self.process(pod).proc.pid, sig)

    def _container_log(self, namespace: str, pod: str, container: str
                       ) -> tuple[Path, Callable[[], bool]] | None:
        """The log file of a container this node runs (the HTTPS endpoint's lookup)."""
        with self._lock:
            found = self._pods.get(pod)
        if found is None or found.namespace != namespace or found.container != container:
            return None
        return found.log, lambda: found.proc.poll() is None

    def deletion(self, pod: str) -> Deletion | None:
        with self._lock:
            return next((d for d in self.deletions if d.pod == pod), None)

    def report(self, tail: int = 3000) -> str:
        with self._lock:
            pods = list(self._pods.values())
        parts = [f"kubelet errors: {self.errors}"] if self.errors else []
        for pod in pods:
            parts.append(f"----- pod {pod.namespace}/{pod.name} (exit {pod.proc.poll()}, "
                         f"killed {pod.killed}, restarts {pod.restarts})\n{pod.logs()[-tail:]}")
        return "\n".join(parts)

    # -- the node (real API server) --------------------------------------------------------

    def _register_node(self) -> None:
        assert self.node is not None
        if self.api.get("nodes", self.node, None) is None:
            self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.node,
                "labels": {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", **self.labels}},
                **({"spec": {"taints": self.taints}} if self.taints else {})})
        stamp = now_rfc3339()
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
        self.api.patch("nodes", self.node, {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.node}],
            **({"daemonEndpoints": {"kubeletEndpoint": {"Port": self.server_endpoint.port}}}
               if self.server_endpoint is not None else {}),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "process kubelet is posting ready status",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "process://1", "kernelVersion": "",
                         "osImage": "process kubelet", "machineID": "", "systemUUID": "",
                         "bootID": ""}}}, None, subresource="status")

    def _beat(self) -> None:
        """The node's heartbeats: its Lease renewed, its Ready condition re-posted."""
        assert self.node is not None and self.heartbeat is not None
        while self._beating.is_set() and not self._stop.is_set():
            try:
                self._renew_lease()
                stamp = now_rfc3339()
                self.api.patch("nodes", self.node, {"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "process kubelet is posting ready status",
                     "lastHeartbeatTime": stamp}]}}, None, subresource="status")
            except Exception as exc:  # a missed beat is what the control plane judges
                logger.warning("node %s: heartbeat failed: %s", self.node, exc)
            self._stop.wait(self.heartbeat)

    def _renew_lease(self) -> None:
        assert self.node is not None
        now = time.time()
        renew = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + \
            f".{int(now % 1 * 1e6):06d}Z"
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": renew}
        if self.api.get("leases", self.node, "kube-node-lease") is None:
            self.api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                             "spec": spec}, "kube-node-lease")
        else:
            self.api.patch("leases", self.node, {"spec": spec}, "kube-node-lease")

    def _fits(self, pod: dict[str, Any]) -> bool:
        """The scheduler's node filters this node applies: nodeSelector and taints."""
        spec = pod.get("spec") or {}
        selector = spec.get("nodeSelector") or {}
        labels = {"kubernetes.io/hostname": self.node or "", **self.labels}
        if any(labels.get(k) != v for k, v in selector.items()):
            return False
        tolerations = spec.get("tolerations") or []
        for taint in self.taints:
            if taint.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(_tolerates(t, taint) for t in tolerations):
                return False
        return True

    def _bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.api.post("pods", meta["name"], {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}},
            meta["namespace"], subresource="binding")

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

    def _mine(self, pod: dict[str, Any]) -> bool:
        if self.node is None:
            return True
        bound = (pod.get("spec") or {}).get("nodeName")
        if not bound and not pod["metadata"].get("deletionTimestamp"):
            if self._fits(pod):
                self._bind(pod)
            return False  # taken on the next pass, bound
        return bool(bound == self.node)

    def _sync(self) -> None:
        listed = {p["metadata"]["name"]: p for p in self.api.list("pods", self.namespace)
                  if self._mine(p)}
        for name, pod in listed.items():
            meta = pod["metadata"]
            known = self._pods.get(name)
            if known is not None and known.uid and known.uid != meta.get("uid"):
                # Same name, new pod (a StatefulSet-like reuse): the old one is gone.
                self._terminate(known, None)
                known = None if known.removed else known
            if meta.get("deletionTimestamp"):
                if known is None:
                    self._finish_deletion(pod)
                else:
                    self._terminate(known, pod)
            elif known is None:
                if (pod.get("status") or {}).get("phase") in (None, "Pending"):
                    self._try_start(pod)
            else:
                self._observe(known)
        for name, known in list(self._pods.items()):
            if name not in listed and not known.removed:
                self._terminate(known, None)
        if self.node is not None and time.monotonic() - self._services_at >= 1.0:
            self._services_at = time.monotonic()
            self._publish_services(list(listed.values()))

    def _publish_services(self, pods: list[dict[str, Any]]) -> None:
        """Node mode: the Services of the pods' namespaces, as the pods resolve them."""
        namespaces = sorted({str(p["metadata"].get("namespace")) for p in pods})
        services = [s for ns in namespaces for s in self.api.list("services", ns)]
        with self._lock:
            running = {name: p for name, p in self._pods.items()
                       if not p.removed and p.proc.poll() is None}
        clusterdns.publish(self.services_table, clusterdns.table(services, pods, running))

    # -- pod start -------------------------------------------------------------------------

    def _try_start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        now = time.monotonic()
        entry = self._waiting.setdefault(name, Waiting(first=now, next_try=now))
        if entry.given_up or now < entry.next_try:
            return
        try:
            self._start(pod, entry)
        except rt.StartFailure as failure:
            entry.attempts += 1
            entry.next_try = now + min(BACKOFF[1], BACKOFF[0] * 2 ** (entry.attempts - 1))
            self._cannot_start(pod, entry, failure)
            return
        self._waiting.pop(name, None)

    def _cannot_start(self, pod: dict[str, Any], entry: Waiting,
                      failure: rt.StartFailure) -> None:
        """Report a container that could not start, as a kubelet does (see the docstring)."""
        meta, spec = pod["metadata"], pod["spec"]
        containers = spec.get("containers") or []
        container = next((c for c in containers if c.get("name") == "worker"), containers[0])
        phase = "Pending"
        reason = failure.reason
        message = failure.message
        if isinstance(failure, rt.PullFailure) and entry.attempts > 1:
            reason = "ImagePullBackOff"
            message = f'Back-off pulling image "{container.get("image")}": {failure.message}'
        state: dict[str, Any] = {"waiting": {"reason": reason, "message": message}}
        last: dict[str, Any] | None = entry.last_terminated
        if isinstance(failure, rt.StartError):
            stamp = now_rfc3339()
            terminated = {"exitCode": rt.START_ERROR_EXIT, "reason": "StartError",
                          "message": failure.message, "startedAt": stamp,
                          "finishedAt": stamp}
            policy = spec.get("restartPolicy", "Always") if self.node else "Never"
            if policy == "Never":
                entry.given_up = True
                phase, state = "Failed", {"terminated": terminated}
            else:
                entry.restarts += 1
                entry.last_terminated = last = terminated
                state = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                     f"back-off restarting failed container "
                                     f"{container.get('name')} in pod {meta['name']}"}}
        status = {"containerStatuses": [{
            "name": container.get("name", "worker"), "ready": False,
            "restartCount": entry.restarts, "state": state,
            "image": container.get("image") or "process", "imageID": "", "started": False,
            **({"lastState": {"terminated": last}} if last else {})}]}
        self._write_status(meta["name"], meta.get("namespace") or self.namespace or "default",
                           phase=phase, ready=False, status=status)
        self._event(pod, failure.event, failure.message)

    def _event(self, pod: dict[str, Any], reason: str, message: str,
               kind: str = "Warning") -> None:
        """A core/v1 Event about the pod, from the kubelet (node mode only)."""
        if self.node is None:
            return
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        stamp = now_rfc3339()
        try:
            self.api.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": namespace, "uid": meta.get("uid", "")},
                "reason": reason, "message": message, "type": kind,
                "source": {"component": "kubelet", "host": self.node},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}, namespace)
        except Exception as exc:  # events are best effort, as on a node
            logger.debug("event for pod %s not written: %s", meta["name"], exc)

    def _service_env(self) -> dict[str, str]:
        """The ``kubernetes`` Service's variables every kubelet gives every container."""
        if self.server is None:
            return {}
        url = urlsplit(self.server)
        host, port = url.hostname or "127.0.0.1", str(url.port or 443)
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                "KUBERNETES_SERVICE_PORT_HTTPS": port,
                "KUBERNETES_PORT": f"tcp://{host}:{port}",
                f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
                f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
                f"KUBERNETES_PORT_{port}_TCP_PORT": port,
                f"KUBERNETES_PORT_{port}_TCP_ADDR": host}

    def _start(self, pod: dict[str, Any], entry: Waiting) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        namespace = meta.get("namespace") or self.namespace or "default"
        spec = pod["spec"]
        containers = spec.get("containers") or []
        container = next((c for c in containers if c.get("name") == "worker"), containers[0])
        image = self.images.pull(str(container.get("image") or ""))
        who = (rt.identity(spec, container, image, pod_name=name) if self.node is not None
               else rt.Identity(None, None))
        if self.node is None:
            finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
            self.api.patch("pods", name, {"metadata": {"finalizers": [*finalizers, FINALIZER]}},
                           namespace)
        podroot = self.workdir / name
        podroot.mkdir(parents=True, exist_ok=True)
        mounts = self._mount_volumes(pod, container, podroot, who)
        env = self._resolve_env(pod, container)
        if image.root is not None:
            self._start_in_image(pod, container, image, who, mounts, env, entry)
            self._watch_storage(pod, container, podroot)
            return
        for key, value in list(env.items()):
            for mount_path, local in mounts.items():
                if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                    env[key] = str(local) + value[len(mount_path.rstrip("/")):]
        if SA_MOUNT in mounts and self.server is not None:
            env["KUBECONFIG"] = str(self._pod_kubeconfig(mounts[SA_MOUNT], namespace))
        port, ports = _ports(container, env)
        command = [*(container.get("command") or ["jobwarden"]), *(container.get("args") or [])]
        command = [command[0], *rt.host_paths(command[1:], mounts)]
        code = image.code
        source = code.source if code is not None else REPO
        if command[0] == "jobwarden":
            python = str(code.python) if code is not None else sys.executable
            command = [python, "-m", "jobwarden", *command[1:]]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
        full_env.update(self._service_env())
        if who.uid is not None:
            # The image's HOME (the Dockerfile's /home/jobwarden), the container user's own.
            home = podroot / "home"
            home.mkdir(exist_ok=True)
            rt.own(home, who, mode=0o700)
            full_env["HOME"] = str(home)
        full_env.update(env)
        full_env.update({"PYTHONPATH": str(source), **self.extra_env})
        if self.node is not None:
            # What a cluster gives a container besides: Service names resolve
            # (tests/e2e/clusterdns.py), and the image's python and jobwarden are on PATH.
            full_env.update({"PYTHONPATH": f"{clusterdns.SHIM}{os.pathsep}{source}",
                             clusterdns.TABLE_ENV: str(self.services_table),
                             clusterdns.NAMESPACE_ENV: namespace,
                             "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                      full_env.get("PATH", os.defpath)])})
        if code is not None and code.path:
            full_env["PATH"] = os.pathsep.join([*map(str, code.path), full_env.get("PATH", "")])
        command = rt.resolve_command(command, full_env)
        prefix = rt.launcher(who)
        log = self.workdir / f"{name}.log"
        log_start = log.stat().st_size if log.exists() else 0
        proc = self._spawn([*prefix, *command], full_env, log, cwd=source)
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        deadline = spec.get("activeDeadlineSeconds")
        record = PodProcess(
            name=name, proc=proc, port=port, log=log, env=env, started_at=time.monotonic(),
            grace=grace, namespace=namespace, uid=meta.get("uid", ""),
            container=container.get("name", "worker"), image=container.get("image", ""),
            command=command, full_env=full_env, ports=ports,
            readiness=container.get("readinessProbe") if self.node else None,
            liveness=container.get("livenessProbe") if self.node else None,
            startup=container.get("startupProbe") if self.node else None,
            started=not (self.node and container.get("startupProbe")),
            restart_policy=spec.get("restartPolicy", "Always") if self.node else "Never",
            restarts=entry.restarts, last_terminated=entry.last_terminated,
            start_time=now_rfc3339(), container_started=now_rfc3339(), prefix=prefix,
            cwd=source, memory_limit=rt.memory_limit(container) if self.node else None,
            deadline=(time.monotonic() + float(deadline)) if deadline is not None else None,
            termination_policy=str(container.get("terminationMessagePolicy") or "File"),
            log_start=log_start)
        with self._lock:
            self._pods[name] = record
        self._watch_storage(pod, container, podroot)
        self._set_status(record)

    def _watch_storage(self, pod: dict[str, Any], container: dict[str, Any],
                       podroot: Path) -> None:
        """Node mode: what the eviction manager measures for this pod (emptyDirs, limit)."""
        name = pod["metadata"]["name"]
        record = self._pods.get(name)
        if self.node is None or record is None:
            return
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if "emptyDir" in volume:
                raw = (volume.get("emptyDir") or {}).get("sizeLimit")
                record.scratch.append(rt.Scratch(
                    volume=mount["name"], path=podroot / "volumes" / mount["name"],
                    size_limit=rt.quantity(raw) if raw is not None else None,
                    size_text=str(raw or "")))
        record.storage_limit = rt.storage_limit(container)
        record.storage_text = str(((container.get("resources") or {}).get("limits") or {})
                                  .get("ephemeral-storage", ""))

    def _start_in_image(self, pod: dict[str, Any], container: dict[str, Any],
                        image: rt.Image, who: rt.Identity, mounts: dict[str, Path],
                        env: dict[str, str], entry: Waiting) -> None:
        """Image mode: the container's command in the image's root filesystem, its volumes
        mounted where the pod says, the image's environment (not the host's), in-cluster
        configuration from the ServiceAccount token at its real path."""
        meta, spec = pod["metadata"], pod["spec"]
        assert image.root is not None
        port, ports = _ports(container, env)
        full_env = {**dict(image.env), **self._service_env(), **env,
                    # The test job modules (tests.support.*), from the repository bound
                    # read-only into the container: the image has only jobwarden.
                    "PYTHONPATH": IMAGE_REPO, **self.extra_env}
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        if not container.get("command"):
            command = ["jobwarden", *command]  # the image's ENTRYPOINT
        command = rt.resolve_command(command, full_env, image.root)
        read_only = {m["mountPath"]: bool(m.get("readOnly")) for m in
                     container.get("volumeMounts") or []}
        binds = [(REPO, IMAGE_REPO, True),
                 *((local, path, read_only.get(path, False)) for path, local in mounts.items())]
        prefix = rt.launcher(who, image=image, binds=binds)
        name = meta["name"]
        log = self.workdir / f"{name}.log"
        log_start = log.stat().st_size if log.exists() else 0
        proc = self._spawn([*prefix, *command], full_env, log)
        deadline = spec.get("activeDeadlineSeconds")
        record = PodProcess(
            name=name, proc=proc, port=port, log=log, env=env, started_at=time.monotonic(),
            grace=float(spec.get("terminationGracePeriodSeconds", 30)),
            namespace=meta.get("namespace") or self.namespace or "default",
            uid=meta.get("uid", ""), container=container.get("name", "worker"),
            image=container.get("image", ""), command=command, full_env=full_env, ports=ports,
            readiness=container.get("readinessProbe"), liveness=container.get("livenessProbe"),
            startup=container.get("startupProbe"), started=not container.get("startupProbe"),
            restart_policy=spec.get("restartPolicy", "Always"), restarts=entry.restarts,
            last_terminated=entry.last_terminated, start_time=now_rfc3339(),
            container_started=now_rfc3339(), prefix=prefix,
            memory_limit=rt.memory_limit(container), root=image.root,
            deadline=(time.monotonic() + float(deadline)) if deadline is not None else None,
            termination_policy=str(container.get("terminationMessagePolicy") or "File"),
            log_start=log_start)
        with self._lock:
            self._pods[name] = record
        self._set_status(record)

    @staticmethod
    def _spawn(command: list[str], env: dict[str, str], log: Path, *, cwd: Path = REPO
               ) -> subprocess.Popen[bytes]:
        with open(log, "ab") as handle:
            return subprocess.Popen(command, env=env, cwd=cwd, stdout=handle,
                                    stderr=subprocess.STDOUT)

    def _pod_kubeconfig(self, token_dir: Path, namespace: str) -> Path:
        """A kubeconfig of the pod's own ServiceAccount token (what in-cluster config reads)."""
        import yaml

        path = token_dir.parent / "kubeconfig"
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "pod",
            "clusters": [{"name": "cluster", "cluster": {
                "server": self.server, "certificate-authority": str(token_dir / "ca.crt")}}],
            "users": [{"name": "sa", "user": {"tokenFile": str(token_dir / "token"),
                                              "token": (token_dir / "token").read_text()}}],
            "contexts": [{"name": "pod", "context": {"cluster": "cluster", "user": "sa",
                                                     "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _mount_volumes(self, pod: dict[str, Any], container: dict[str, Any],
                       podroot: Path, who: rt.Identity) -> dict[str, Path]:
        spec = pod["spec"]
        namespace = pod["metadata"].get("namespace") or self.namespace or "default"
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                continue
            local = podroot / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            try:
                if "secret" in volume:
                    self._write_items(local, self._secret_data(volume["secret"]["secretName"],
                                                               namespace),
                                      volume["secret"].get("items"))
                elif "configMap" in volume:
                    self._write_items(local, self._config_data(volume["configMap"]["name"],
                                                               namespace),
                                      volume["configMap"].get("items"))
                elif "projected" in volume:
                    for source in volume["projected"].get("sources") or []:
                        self._project(pod, source, local)
            except Missing as missing:
                raise rt.MountFailure(f'MountVolume.SetUp failed for volume "{mount["name"]}" '
                                      f": {missing}") from None
            # Files root:fsGroup 0644, directories the container user's (emptyDir: 0777).
            for path in (local, *local.rglob("*")):
                rt.own(path, who, mode=0o777 if "emptyDir" in volume and path == local
                       else None)
            mounts[mount["mountPath"]] = local
        return mounts

    @staticmethod
    def _write_items(local: Path, data: dict[str, bytes],
                     items: list[dict[str, Any]] | None) -> None:
        for item in items or [{"key": k, "path": k} for k in data]:
            target = local / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data[item["key"]])

    def _secret_data(self, name: str, namespace: str) -> dict[str, bytes]:
        secret = self.api.get("secrets", name, namespace)
        if secret is None:
            raise Missing(f'secret "{name}" not found')
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
        return data

    def _config_data(self, name: str, namespace: str) -> dict[str, bytes]:
        config = self.api.get("configmaps", name, namespace)
        if config is None:
            raise Missing(f'configmap "{name}" not found')
        return {k: str(v).encode() for k, v in (config.get("data") or {}).items()}

    def _project(self, pod: dict[str, Any], source: dict[str, Any], local: Path) -> None:
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        if "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            account = pod["spec"].get("serviceAccountName") or "default"
            request: dict[str, Any] = {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": int(spec.get("expirationSeconds", 3607)),
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                            "name": meta["name"], "uid": meta.get("uid")}}}
            if spec.get("audience"):
                request["spec"]["audiences"] = [spec["audience"]]
            answer = self.api.post("serviceaccounts", account, request, namespace,
                                   subresource="token")
            (local / spec["path"]).write_text(answer["status"]["token"])
        elif "configMap" in source:
            self._write_items(local, self._config_data(source["configMap"]["name"], namespace),
                              source["configMap"].get("items"))
        elif "secret" in source:
            self._write_items(local, self._secret_data(source["secret"]["name"], namespace),
                              source["secret"].get("items"))
        elif "downwardAPI" in source:
            for item in source["downwardAPI"].get("items") or []:
                path = (item.get("fieldRef") or {}).get("fieldPath", "")
                (local / item["path"]).write_text(self._field(pod, path))

    def _field(self, pod: dict[str, Any], path: str) -> str:
        meta = pod["metadata"]
        fields = {"metadata.name": meta["name"],
                  "metadata.namespace": meta.get("namespace") or self.namespace or "default",
                  "metadata.uid": meta.get("uid", ""),
                  "spec.nodeName": self.node or "",
                  "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
                  "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
        return str(fields.get(path, ""))

    def _resolve_env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        namespace = pod["metadata"].get("namespace") or self.namespace or "default"
        env: dict[str, str] = {}
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
                continue
            source = entry.get("valueFrom") or {}
            if "fieldRef" in source:
                env[entry["name"]] = self._field(pod, source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source or "configMapKeyRef" in source:
                secret = "secretKeyRef" in source
                ref = source["secretKeyRef" if secret else "configMapKeyRef"]
                try:
                    data = (self._secret_data if secret else self._config_data)(ref["name"],
                                                                               namespace)
                    if ref["key"] not in data:
                        raise Missing(f"couldn't find key {ref['key']} in "
                                      f"{'Secret' if secret else 'ConfigMap'} "
                                      f"{namespace}/{ref['name']}")
                except Missing as missing:
                    if ref.get("optional"):
                        continue
                    raise rt.ConfigFailure(str(missing)) from None
                env[entry["name"]] = data[ref["key"]].decode()
        return env

    # -- status ----------------------------------------------------------------------------

    def _probe(self, pod: PodProcess, probe: dict[str, Any] | None, default: str) -> bool:
        """One attempt of a container probe; in emulator mode (no probes given) ``default``
        is GET on the worker's port, and a pod without a port counts as passing."""
        if pod.proc.poll() is not None:
            return False
        if probe is None:
            if pod.port is None:
                return True
            probe = {"httpGet": {"path": default, "port": str(pod.port)}}
            ports = {str(pod.port): pod.port}
        else:
            ports = pod.ports
        return rt.probe(probe, ports=ports, env=pod.full_env, prefix=pod.prefix, cwd=pod.cwd,
                        root=pod.root)

    @staticmethod
    def _due(pod: PodProcess, probe: dict[str, Any], last: float, now: float) -> bool:
        delay = float(probe.get("initialDelaySeconds", 0))
        period = float(probe.get("periodSeconds", 10))
        return now - pod.started_at >= delay and now - last >= period

    def _observe(self, pod: PodProcess) -> None:
        if pod.phase != "Running" or pod.term_at is not None:
            return
        now = time.monotonic()
        if pod.restart_at is not None:
            if now < pod.restart_at:
                return
            pod.restart_at = None
            pod.log_start = pod.log.stat().st_size if pod.log.exists() else 0
            pod.proc = self._spawn([*pod.prefix, *pod.command], pod.full_env, pod.log,
                                   cwd=pod.cwd)
            pod.started_at, pod.container_started = now, now_rfc3339()
            pod.liveness_failures = pod.startup_failures = 0
            pod.started = pod.startup is None
            pod.oom = False
            self._set_status(pod)
            return
        code = pod.proc.poll()
        if code is not None:
            self._exited(pod, code, now)
            return
        if pod.deadline is not None and now >= pod.deadline and pod.reason is None:
            # What a kubelet does past activeDeadlineSeconds: the pod fails, its
            # containers are stopped with their grace period.
            pod.reason = "DeadlineExceeded"
            pod.message = "Pod was active on the node longer than the specified deadline"
            pod.deadline = now + pod.grace  # from now on: when SIGKILL follows
            with contextlib.suppress(ProcessLookupError):
                pod.proc.send_signal(signal.SIGTERM)
            return
        if pod.reason == "DeadlineExceeded":
            if pod.deadline is not None and now >= pod.deadline:
                pod.proc.kill()
                pod.killed = True
            return
        if pod.memory_limit is not None and rt.rss(pod.proc.pid) > pod.memory_limit:
            logger.warning("pod %s exceeded its memory limit: OOM-killing it", pod.name)
            pod.oom = True
            pod.proc.kill()
            self._exited(pod, pod.proc.wait(timeout=10), now)
            return
        if pod.scratch or pod.storage_limit is not None:
            violation = rt.storage_violation(pod.scratch, pod.storage_limit, pod.storage_text)
            if violation is not None:
                self._evict(pod, violation, now)
                return
        if not pod.started:
            assert pod.startup is not None
            if self._due(pod, pod.startup, pod.last_startup, now):
                pod.last_startup = now
                if self._probe(pod, pod.startup, "/healthz"):
                    pod.started = True
                    self._set_status(pod)
                else:
                    pod.startup_failures += 1
                    if pod.startup_failures >= int(pod.startup.get("failureThreshold", 3)):
                        logger.warning("pod %s failed its startup probe: restarting", pod.name)
                        self._stop_process(pod, pod.grace)
            return
        if pod.liveness is not None and self._due(pod, pod.liveness, pod.last_liveness, now):
            pod.last_liveness = now
            if self._probe(pod, pod.liveness, "/healthz"):
                pod.liveness_failures = 0
            else:
                pod.liveness_failures += 1
                if pod.liveness_failures >= int(pod.liveness.get("failureThreshold", 3)):
                    logger.warning("pod %s failed its liveness probe: restarting", pod.name)
                    self._stop_process(pod, pod.grace)
                    return
        ready = self._probe(pod, pod.readiness, "/readyz")
        if ready != pod.ready:
            pod.ready = ready
            self._set_status(pod)

    def _evict(self, pod: PodProcess, message: str, now: float) -> None:
        """What a kubelet's eviction manager does to a pod over its local-storage limits:
        the containers killed at once (grace period 0 for a limit violation), phase
        ``Failed`` with reason ``Evicted`` and the message, a ``DisruptionTarget``
        condition (``TerminationByKubelet``), never restarted, and an ``Evicted`` Event."""
        logger.warning("pod %s evicted: %s", pod.name, message)
        pod.reason, pod.message = "Evicted", message
        pod.conditions = [{"type": "DisruptionTarget", "status": "True",
                           "reason": "TerminationByKubelet", "message": message,
                           "lastTransitionTime": now_rfc3339()}]
        with contextlib.suppress(ProcessLookupError):
            pod.proc.kill()
        pod.killed = True
        self._event({"metadata": {"name": pod.name, "namespace": pod.namespace,
                                  "uid": pod.uid}}, "Evicted", message)
        self._exited(pod, pod.proc.wait(timeout=10), now)

    def _exited(self, pod: PodProcess, returncode: int, now: float) -> None:
        """The container's process ended: restart it or end the pod, per the restart policy."""
        code = rt.exit_code(returncode)
        terminated = {
            "exitCode": code, "startedAt": pod.container_started, "finishedAt": now_rfc3339(),
            "reason": "OOMKilled" if pod.oom else "Completed" if code == 0 else "Error",
            "containerID": f"process://{pod.proc.pid}"}
        if code > 128 and not pod.oom:
            terminated["signal"] = code - 128
        if code and pod.termination_policy == "FallbackToLogsOnError":
            message = pod.termination_message()
            if message:
                terminated["message"] = message
        pod.ready, pod.last_exit = False, code
        if pod.reason is None and (pod.restart_policy == "Always"
                                   or (pod.restart_policy == "OnFailure" and code)):
            # Back off like a kubelet (10 s doubling; 1 s doubling capped at 10 s here).
            pod.restarts += 1
            pod.last_terminated = terminated
            pod.restart_at = now + min(BACKOFF[1], BACKOFF[0] * 2 ** (pod.restarts - 1))
            self._set_status(pod, waiting="CrashLoopBackOff" if code else "Completed")
            return
        pod.terminated = terminated
        pod.phase = "Succeeded" if code == 0 and pod.reason is None else "Failed"
        self._set_status(pod)

    def _stop_process(self, pod: PodProcess, grace: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            pod.proc.send_signal(signal.SIGTERM)
        try:
            pod.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pod.proc.kill()
            pod.proc.wait(timeout=10)

    def _set_status(self, pod: PodProcess, *, waiting: str | None = None) -> None:
        state: dict[str, Any]
        if pod.terminated is not None:
            state = {"terminated": pod.terminated}
        elif waiting is not None:
            message = (f"back-off restarting failed container {pod.container} in pod "
                       f"{pod.name}" if waiting == "CrashLoopBackOff" else "")
            state = {"waiting": {"reason": waiting, **({"message": message} if message else {})}}
        else:
            state = {"running": {"startedAt": pod.container_started}}
        container: dict[str, Any] = {"name": pod.container, "ready": pod.ready,
                                     "restartCount": pod.restarts, "state": state,
                                     "image": pod.image or "process", "imageID": "",
                                     "containerID": f"process://{pod.proc.pid}",
                                     "started": pod.started and "running" in state}
        if pod.last_terminated is not None:
            container["lastState"] = {"terminated": pod.last_terminated}
        extra: dict[str, Any] = {"containerStatuses": [container], "startTime": pod.start_time}
        if pod.reason is not None:
            extra.update({"reason": pod.reason, "message": pod.message or ""})
        self._write_status(pod.name, pod.namespace, phase=pod.phase, ready=pod.ready,
                           status=extra, more_conditions=pod.conditions)

    def _write_status(self, name: str, namespace: str, *, phase: str, ready: bool,
                      status: dict[str, Any],
                      more_conditions: list[dict[str, Any]] | None = None) -> None:
        """The status subresource with the conditions a kubelet sets (node mode: all four)."""
        flag = "True" if ready else "False"
        conditions = [{"type": "Ready", "status": flag},
                      {"type": "ContainersReady", "status": flag}]
        if self.node is not None:
            stamp = now_rfc3339()
            conditions = [{**c, "lastTransitionTime": stamp} for c in [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"}, *conditions]]
        conditions += more_conditions or []
        body: dict[str, Any] = {"phase": phase, "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                                "conditions": conditions, **status}
        if self.node is not None:
            body.update({"podIPs": [{"ip": "127.0.0.1"}], "hostIPs": [{"ip": "127.0.0.1"}]})
            body.setdefault("startTime", now_rfc3339())
        else:
            body.pop("startTime", None)
        try:
            self.api.patch("pods", name, {"status": body}, namespace, subresource="status")
        except Exception as exc:  # the pod may be gone already
            logger.debug("status of pod %s not written: %s", name, exc)

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
            self._finish_deletion(manifest)
        pod.removed = True

    def _finish_deletion(self, manifest: dict[str, Any]) -> None:
        meta = manifest["metadata"]
        namespace = meta.get("namespace") or self.namespace or "default"
        if self.node is not None:
            # What a kubelet does once the containers are gone: the final, immediate delete.
            try:
                self.api.delete("pods", meta["name"], namespace, grace=0)
            except Exception as exc:
                logger.debug("pod %s not deleted: %s", meta["name"], exc)
            return
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers:
            finalizers.remove(FINALIZER)
            with contextlib.suppress(Exception):
                self.api.patch("pods", meta["name"], {"metadata": {"finalizers": finalizers}},
                               namespace)
