"""The real-cluster tier: etcd, kube-apiserver, kube-controller-manager, helm, kubectl.

One control plane per pytest worker (session scope: starting it costs seconds,
not a test's worth); every test gets its own namespace, its own process kubelet
(a Node named after the namespace, taking only that namespace's pods), its own
Helm release name and its own PostgreSQL database. The operator is installed
by the real Helm from charts/jobwarden and watches only the test's namespace
(``operator.watchNamespaces``), so tests on one control plane do not see each
other. Timings are shortened only through chart values (``operator.extraEnv``)
and WorkerPool ``spec.env``, as a user would.

Skipped as a whole (one line) where there is no Go toolchain to build the
binaries, or no openssl to make certificates.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobwarden.api.client import Client
from tests.cluster import pki, tools
from tests.cluster.api import ApiError, RealKubeAPI
from tests.cluster.controlplane import ControlPlane
from tests.e2e import podrunscenarios
from tests.e2e.conftest import WORKER_ENV, host_observation
from tests.e2e.kubelet import ProcessKubelet
from tests.e2e.podruntime import Images
from tests.support.kube import Kubectl
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "jobwarden"
#: The chart's operator pods (and Deployments).
OPERATOR_PODS = "app.kubernetes.io/component=operator"
#: The operator's timings in tests, set as a user would: chart values.
OPERATOR_ENV = {
    "JOBWARDEN_POOL_INTERVAL": "0.5",
    "JOBWARDEN_STATUS_INTERVAL": "0.5",
    "JOBWARDEN_SCHEDULE_CHECK_SECONDS": "0.2",
    "JOBWARDEN_REAP_INTERVAL": "0.5",
    "JOBWARDEN_GAUGE_INTERVAL": "0.5",
    "JOBWARDEN_LOOP_LEASE_SECONDS": "3",
}


@pytest.fixture(scope="session")
def kube_tools_dir() -> Path:
    try:
        return tools.kube_tools()
    except tools.ToolsUnavailable as exc:
        pytest.skip(f"real-cluster tier skipped: {exc}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def started_plane(kube_tools_dir: Path, workdir: Path, **options: Any
                  ) -> Iterator[ControlPlane]:
    """A control plane started in ``workdir`` and stopped on exit (also when its start
    failed: the components that did start are ended, their logs kept in ``workdir``).
    The test is skipped where openssl is missing to make the certificates. ``options``:
    ControlPlane's (more controllers, controller-manager flags)."""
    if not pki.available():
        pytest.skip("real-cluster tier skipped: no openssl to make the certificates")
    plane = ControlPlane(kube_tools_dir, workdir, **options)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


class SharedPlane:
    """The control plane the tests of one pytest process (xdist worker) share: started by
    the first test that needs it, stopped by :func:`pytest_runtest_teardown` once no test
    later in the collection needs it (tests/conftest.py orders the tier first, so an idle
    plane -- etcd, API server and controller manager, ~2% of a core and ~0.6 GB -- does not
    sit through the rest of the run), started again should one come after all."""

    def __init__(self, kube_tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> None:
        self.kube_tools_dir = kube_tools_dir
        self.tmp_path_factory = tmp_path_factory
        self._stack: contextlib.ExitStack | None = None
        self._plane: ControlPlane | None = None

    def get(self) -> ControlPlane:
        if self._plane is None:
            stack = contextlib.ExitStack()
            self._plane = stack.enter_context(started_plane(
                self.kube_tools_dir, self.tmp_path_factory.mktemp("controlplane")))
            self._stack = stack
        return self._plane

    def stop(self) -> None:
        stack, self._stack, self._plane = self._stack, None, None
        if stack is not None:
            stack.close()


_SHARED = pytest.StashKey[SharedPlane]()
#: Index (in the session's items) of the last test using ``control_plane``.
_LAST_USER = pytest.StashKey[int]()


@pytest.fixture(scope="session")
def shared_plane(kube_tools_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Iterator[SharedPlane]:
    shared = SharedPlane(kube_tools_dir, tmp_path_factory)
    request.config.stash[_SHARED] = shared
    yield shared
    shared.stop()


@pytest.fixture
def control_plane(shared_plane: SharedPlane) -> ControlPlane:
    """This process's shared control plane (see :class:`SharedPlane`)."""
    return shared_plane.get()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a test here is torn down: stop the shared plane if the next test this process
    runs comes after the last one in the collection that uses it. xdist's ``load`` mode
    hands tests out in collection order, so no user of the plane will come to this worker
    any more; if one does all the same (another mode), the plane starts again."""
    result = yield
    shared = item.config.stash.get(_SHARED, None)
    if shared is None:
        return result
    items = item.session.items
    if _LAST_USER not in item.config.stash:
        item.config.stash[_LAST_USER] = max(
            (i for i, it in enumerate(items) if "control_plane" in it.fixturenames),
            default=-1)
    if nextitem is None or items.index(nextitem) > item.config.stash[_LAST_USER]:
        shared.stop()
    return result


@pytest.fixture(scope="module")
def second_plane(kube_tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[ControlPlane]:
    """Another control plane ("a second cluster"), shared by the tests of a module that put
    a cluster on it beside ``realkube``'s on the same database."""
    with started_plane(kube_tools_dir, tmp_path_factory.mktemp("controlplane-b")) as plane:
        yield plane


@dataclasses.dataclass
class RealCluster:
    plane: ControlPlane
    api: RealKubeAPI
    namespace: str
    kubectl: Kubectl
    helm: Helm
    kubelet: ProcessKubelet
    dsn: str
    client: Client
    workdir: Path
    releases: list[str] = dataclasses.field(default_factory=list)

    def values_file(self, values: dict[str, Any], name: str = "values.yaml") -> Path:
        path = self.workdir / name
        path.write_text(yaml.safe_dump(values))
        return path

    def base_values(self, **extra: Any) -> dict[str, Any]:
        """Chart values of a test install: the test's database, namespace and timings."""
        values: dict[str, Any] = {
            "database": {"dsn": self.dsn},
            "operator": {"watchNamespaces": [self.namespace],
                         "extraEnv": [{"name": k, "value": v}
                                      for k, v in OPERATOR_ENV.items()],
                         # Started and ready within a second of answering: the chart's
                         # startup probe checks every 5 s (so an operator start took up
                         # to 5 s more); 300 checks keep its 300 s budget.
                         "startupProbe": {"periodSeconds": 1, "failureThreshold": 300},
                         "readinessProbe": {"periodSeconds": 1},
                         "terminationGracePeriodSeconds": 10},
        }
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
        return values

    def install(self, release: str | None = None, *, values: dict[str, Any] | None = None,
                wait: bool = True) -> str:
        release = release or f"jw-{self.namespace}"
        args = ["install", release, str(CHART), "--namespace", self.namespace,
                "-f", str(self.values_file(values or self.base_values(), f"{release}.yaml"))]
        if wait:
            args += ["--wait", "--timeout", "180s"]
        self.helm(*args, timeout=240)
        self.releases.append(release)
        return release

    def pods(self, labels: str | None = None, *, alive: bool = True) -> list[dict[str, Any]]:
        pods = self.api.list("pods", self.namespace, labels=labels)
        if alive:
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return pods

    def wait(self, probe: Callable[[], Any], *, timeout: float = 60.0,
             what: str = "a condition") -> Any:
        """Poll ``probe`` until truthy; the kubelet's and the control plane's logs on failure."""
        return wait_for(probe, timeout=timeout, interval=0.2, message=what,
                        check=self._kubelet_ok, context=lambda: self.kubelet.report(2500))

    def _kubelet_ok(self) -> None:
        if self.kubelet.errors:
            raise AssertionError(f"kubelet failed: {self.kubelet.errors}\n"
                                 f"{self.kubelet.report(2500)}")

    def site(self, secret_name: str = "db") -> podrunscenarios.Site:
        """This cluster as the pod-run scenarios see it (tests/e2e/podrunscenarios.py), the
        DSN Secret ``secret_name`` made here if it is missing."""
        if self.api.get("secrets", secret_name, self.namespace) is None:
            self.api.create(secret(secret_name, self.namespace, self.dsn))
        return podrunscenarios.Site(
            api=self.api, kubelet=self.kubelet, client=self.client, dsn=self.dsn,
            namespace=self.namespace, secret=secret_name, wait=self.wait,
            operator_ports=self.operator_ports, scale_operators=self.scale_operators)

    def operator_ports(self) -> list[int]:
        """The metrics port of every operator pod running on this cluster's node."""
        return [p.port for p in self.kubelet.pods.values()
                if p.container == "operator" and p.port is not None and not p.removed
                and p.proc.poll() is None]

    def scale_operators(self, replicas: int) -> None:
        """Every operator Deployment here scaled to ``replicas`` (as ``kubectl scale``
        does); returns once that many operator pods run and are Ready -- for none, once
        the last operator process exited."""
        deployments = self.api.list("deployments", self.namespace, labels=OPERATOR_PODS)
        for deployment in deployments:
            self.api.patch("deployments", deployment["metadata"]["name"],
                           {"spec": {"replicas": replicas}}, self.namespace)
        want = replicas * len(deployments)

        def settled() -> bool:
            ready = [p for p in self.pods(OPERATOR_PODS) if pod_ready(p)]
            return len(ready) == want and len(self.operator_ports()) == want

        self.wait(settled, timeout=180, what=f"{want} operator(s) running and Ready")

    def operator_logs(self) -> str:
        return "\n".join(p.logs() for p in self.kubelet.pods.values()
                         if p.container == "operator")


Helm = tools.Helm


def pod_ready(pod: dict[str, Any]) -> bool:
    """The pod's ``Ready`` condition is ``True`` (what the kubelet reports)."""
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@contextlib.contextmanager
def open_cluster(plane: ControlPlane, *, namespace: str, dsn: str, client: Client,
                 workdir: Path, images: Images | None = None,
                 observe: Callable[[str], Any] | None = None,
                 **kubelet_options: Any) -> Iterator[RealCluster]:
    """A namespace on ``plane`` with its own Node and process kubelet, helm and kubectl.

    ``observe`` is what the kubelet records of a host at its pod's deletion (default:
    the host registry through ``client``).

    On exit the test's processes end and its objects are left to the control plane,
    without waiting for them to go (see :func:`close_cluster`). Also used for a second
    control plane on the same database (two "clusters").
    """
    api = plane.admin_api()
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    assert plane.pki is not None
    kubelet = ProcessKubelet(api, workdir=workdir / "kubelet", namespace=namespace,
                             node=f"node-{namespace}-{plane.api_port}", server=plane.server,
                             ca_file=plane.pki.ca_cert,
                             extra_env={"JOBWARDEN_TEST_AUDIT_DSN": dsn},
                             observe=observe or host_observation(client), interval=0.2,
                             images=images, tls=(plane.pki.kubelet.cert, plane.pki.kubelet.key),
                             **kubelet_options).start()
    assert plane.kubeconfig.exists()
    box = RealCluster(
        plane=plane, api=api, namespace=namespace,
        kubectl=Kubectl(plane.kubeconfig, cache_dir=workdir / "kubectl-cache", timeout=60),
        helm=Helm(plane.bin_dir / "helm", plane.kubeconfig, workdir / "helm"),
        kubelet=kubelet, dsn=dsn, client=client, workdir=workdir)
    try:
        yield box
    finally:
        close_cluster(api, namespace, kubelet)
        print(kubelet.report())


def close_cluster(api: RealKubeAPI, namespace: str, kubelet: ProcessKubelet) -> None:
    """End a test's cluster at once: its node's processes first (SIGTERM, SIGKILL after 5 s,
    as :meth:`ProcessKubelet.stop` does), then its namespace and node are deleted and its
    pods force-deleted (grace 0: no kubelet is left to confirm them), so the control plane's
    namespace controller finishes the namespace in the background.

    Nothing here waits for the namespace to go (it took 5-30 s a test): no later test looks
    at it -- each has its own namespace, node, Helm release name and database -- and what
    namespace deletion and ``helm uninstall`` must do is asserted where it is the subject
    (tests/cluster/test_helm_lifecycle.py). The release is not uninstalled: its namespaced
    objects go with the namespace; its cluster-scoped RBAC objects are named after the
    release, which no other test uses, and go with the control plane.
    """
    kubelet.stop()
    pods: list[dict[str, Any]] = []
    with contextlib.suppress(ApiError):
        api.delete("namespaces", namespace, None)
    # After the namespace's deletion began, no pod can be created in it any more.
    with contextlib.suppress(ApiError):
        pods = api.list("pods", namespace)
    for pod in pods:
        with contextlib.suppress(ApiError):
            api.delete("pods", pod["metadata"]["name"], namespace, grace=0)
    with contextlib.suppress(ApiError):
        api.delete("nodes", kubelet.node or "", None)


@pytest.fixture
def realkube(control_plane: ControlPlane, dsn: str, client: Client, tmp_path: Path
             ) -> Iterator[RealCluster]:
    with open_cluster(control_plane, namespace=f"t-{uuid.uuid4().hex[:10]}", dsn=dsn,
                      client=client, workdir=tmp_path) as box:
        yield box


def worker_pool(name: str, namespace: str, secret: str, **spec: Any) -> dict[str, Any]:
    """A WorkerPool of the test jobs, with the e2e tier's worker timings."""
    return {
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "WorkerPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"image": "example/jobs:1", "replicas": 1, "queues": ["default"],
                 "concurrency": 4, "apps": ["tests.support.testjobs"],
                 "dsnSecretRef": {"name": secret}, "drainTimeoutSeconds": 30,
                 "env": [{"name": k, "value": v} for k, v in WORKER_ENV.items()], **spec},
    }


def secret(name: str, namespace: str, dsn: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"dsn": base64.b64encode(dsn.encode()).decode()}}
