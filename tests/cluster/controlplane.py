"""etcd + kube-apiserver + kube-controller-manager on loopback, as real processes.

This is what controller-runtime's envtest does (real etcd and API server
binaries), plus the controller manager so that Deployments, ReplicaSets, the
garbage collector, namespace deletion, PodDisruptionBudgets and ServiceAccount
tokens behave as in a cluster. No scheduler: the process kubelet binds pods to
its own node itself (tests/e2e/kubelet.py). The binaries come from
scripts/build-kube-tools (tests/cluster/tools.py).

Everything listens on 127.0.0.1 on free ports and lives in one directory;
``stop()`` ends the processes (SIGKILL) and leaves the logs there
for the test report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import yaml

from tests.cluster import pki
from tests.cluster.api import ApiError, RealKubeAPI
from tests.support.ports import free_port

#: What the controller manager runs: enough for a Deployment to become pods, for
#: owner references, namespaces and ServiceAccount tokens to work.
CONTROLLERS = ",".join([
    "deployment-controller", "replicaset-controller", "garbage-collector-controller",
    "namespace-controller", "disruption-controller", "serviceaccount-controller",
    "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
])
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: What node loss needs besides: the node lifecycle controller (a node whose heartbeats
#: stop becomes Unknown and gets the ``node.kubernetes.io/unreachable`` NoExecute taint),
#: the taint eviction controller (deletes the pods that do not tolerate it, with a
#: ``DisruptionTarget`` condition) and the pod garbage collector (pods of deleted nodes).
NODE_LOSS_CONTROLLERS = ("node-lifecycle-controller", "taint-eviction-controller",
                         "pod-garbage-collector-controller")


@dataclasses.dataclass
class Component:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    #: The flags it was started with (:meth:`ControlPlane.restart` starts it again so).
    args: tuple[str, ...] = ()

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries its log tail."""


def write_kubeconfig(path: Path, server: str, ca: Path, *, user: str,
                     cert: Path | None = None, key: Path | None = None,
                     token: str | None = None, namespace: str = "default") -> Path:
    credentials: dict[str, str] = {}
    if cert is not None and key is not None:
        credentials = {"client-certificate": str(cert), "client-key": str(key)}
    if token is not None:
        credentials = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server,
                                                  "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user,
                                                  "namespace": namespace}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class ControlPlane:
    def __init__(self, bin_dir: Path, workdir: Path, *, controllers: tuple[str, ...] = (),
                 manager_args: tuple[str, ...] = ()) -> None:
        self.bin_dir = bin_dir
        self.workdir = workdir
        #: Controllers besides CONTROLLERS, and extra controller-manager flags.
        self.controllers = controllers
        self.manager_args = manager_args
        self.components: list[Component] = []
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.api_port = free_port()
        self.pki: pki.Pki | None = None
        self.kubeconfig = workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def admin_api(self) -> RealKubeAPI:
        assert self.pki is not None
        return RealKubeAPI("127.0.0.1", self.api_port, ca=self.pki.ca_cert,
                           cert=self.pki.admin.cert, key=self.pki.admin.key)

    def _spawn(self, name: str, args: list[str], *, mode: str = "wb") -> Component:
        log = self.workdir / f"{name}.log"
        with open(log, mode) as handle:
            proc = subprocess.Popen([str(self.bin_dir / name), *args], stdout=handle,
                                    stderr=subprocess.STDOUT, cwd=self.workdir,
                                    start_new_session=True)
        component = Component(name, proc, log, tuple(args))
        self.components.append(component)
        return component

    def _wait(self, component: Component, probe: callable, timeout: float) -> None:  # type: ignore[valid-type]
        deadline = time.monotonic() + timeout
        while True:
            if component.proc.poll() is not None:
                raise ControlPlaneError(f"{component.name} exited {component.proc.returncode}:"
                                        f"\n{component.tail()}")
            with contextlib.suppress(Exception):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{component.name} not ready after {timeout} s:"
                                        f"\n{component.tail()}")
            time.sleep(0.2)

    def start(self, *, timeout: float = 180.0) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = keys = pki.make(self.workdir / "pki")
        etcd = self._spawn("etcd", [
            "--name=test", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{self.peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer_port}",
            f"--initial-cluster=test=http://127.0.0.1:{self.peer_port}",
            # A test cluster lives minutes: durability buys nothing, fsync costs seconds.
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=1073741824",
        ])

        def etcd_healthy() -> bool:
            with socket.create_connection(("127.0.0.1", self.etcd_port), timeout=1):
                return True

        self._wait(etcd, etcd_healthy, 60)
        apiserver = self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={keys.serving_cert}", f"--tls-private-key-file={keys.serving_key}",
            f"--client-ca-file={keys.ca_cert}",
            # kubectl logs: the API server proxies to the node's kubelet (the process
            # kubelet's HTTPS endpoint on 127.0.0.1), checks its certificate, shows its own.
            f"--kubelet-certificate-authority={keys.ca_cert}",
            f"--kubelet-client-certificate={keys.apiserver_kubelet_client.cert}",
            f"--kubelet-client-key={keys.apiserver_kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,"
            "DefaultTolerationSeconds,PodSecurity",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={keys.sa_pub}",
            f"--service-account-signing-key-file={keys.sa_key}",
            # Allocation only: nothing ever connects to a Service address here.
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=false", "--profiling=false",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            "--v=1",
        ])
        api = self.admin_api()

        def api_ready() -> bool:
            return api.request("GET", "/readyz") is not None

        self._wait(apiserver, api_ready, timeout)
        write_kubeconfig(self.kubeconfig, self.server, keys.ca_cert, user="admin",
                         cert=keys.admin.cert, key=keys.admin.key)
        kcm_config = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig", self.server, keys.ca_cert,
            user="system:kube-controller-manager", cert=keys.controller_manager.cert,
            key=keys.controller_manager.key)
        manager = self._spawn("kube-controller-manager", [
            f"--kubeconfig={kcm_config}",
            f"--authentication-kubeconfig={kcm_config}",
            f"--authorization-kubeconfig={kcm_config}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={self.workdir / 'kcm-certs'}",
            f"--controllers={','.join([CONTROLLERS, *self.controllers])}",
            f"--service-account-private-key-file={keys.sa_key}",
            f"--root-ca-file={keys.ca_cert}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2",
            "--concurrent-gc-syncs=4", "--concurrent-namespace-syncs=2",
            *self.manager_args,
            "--v=1",
        ])

        def controllers_ready() -> bool:
            # The root CA publisher writes kube-root-ca.crt into every namespace: proof
            # the controller manager is up and acting.
            return api.get("configmaps", "kube-root-ca.crt", "default") is not None

        self._wait(manager, controllers_ready, timeout)
        return self

    def restart(self, name: str) -> Component:
        """A component crashes (SIGKILL) and its supervisor starts it again at once, with
        the same flags (its log goes on in the same file). Waits for nothing more."""
        old = next(c for c in reversed(self.components) if c.name == name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(old.proc.pid, signal.SIGKILL)
        old.proc.wait(timeout=10)
        return self._spawn(name, list(old.args), mode="ab")

    def ensure_namespace(self, name: str) -> None:
        api = self.admin_api()
        with contextlib.suppress(ApiError):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def stop(self) -> None:
        """SIGKILL: a test plane keeps nothing (etcd runs without fsync, its directory is
        the test's), and the API server's graceful shutdown took 8-15 s of every stop."""
        for component in reversed(self.components):
            if component.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(component.proc.pid, signal.SIGKILL)
        for component in reversed(self.components):
            component.proc.wait(timeout=10)

    def report(self, chars: int = 3000) -> str:
        return "\n".join(f"----- {c.name} (exit {c.proc.poll()})\n{c.tail(chars)}"
                         for c in self.components)
