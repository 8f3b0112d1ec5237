"""Pods run inside the image: the chart's operator and a WorkerPool's worker, chrooted
into the root filesystem of the image scripts/build-image built from the Dockerfile.

This is the process kubelet's image mode (tests/e2e/podruntime.py): each container
gets a mount namespace with its volumes mounted where the pod says, the image's
environment rather than the host's, uid 10001 without any extra capability, and
the ServiceAccount token at its real path -- so the operator finds its API server
by in-cluster configuration (``KUBERNETES_SERVICE_HOST``), as in a cluster, and
the image's own ``jobwarden`` runs. Only the test job modules come from the
repository (bound read-only at ``/opt/jobwarden-tests``).

Marked ``image``: it runs after the image is built (scripts/test's serial phase).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import conninfo

from jobwarden.api.client import Client
from jobwarden.structs.states import JobStatus
from tests.cluster.conftest import open_cluster, secret, worker_pool
from tests.cluster.controlplane import ControlPlane
from tests.e2e import podruntime as rt
from tests.image import buildah
from tests.support import testjobs

pytestmark = [pytest.mark.realkube, pytest.mark.image, pytest.mark.slow]


@pytest.fixture(scope="module")
def image_root() -> Iterator[rt.Image]:
    try:
        name = buildah.build()
    except buildah.ImageUnavailable as exc:
        pytest.skip(f"image mode skipped: {exc}")
    tool = buildah.Buildah()
    container = tool.working_container(name)
    try:
        yield tool.root_image(container)
    finally:
        tool("umount", container, check=False)
        tool("rm", container, check=False)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


@contextlib.contextmanager
def loopback_dsn(dsn: str) -> Iterator[str]:
    """``dsn`` reachable from inside the image over TCP on loopback.

    The test command's embedded PostgreSQL (CI has no server on 5432) listens only on
    a Unix socket in a 0700 directory of the host's /tmp, which a chrooted uid 10001
    cannot reach; pods share the host's network, so a relay on a loopback port that
    forwards to the socket gives them the database as a TCP service, as in a cluster.
    """
    params = conninfo.conninfo_to_dict(dsn)
    host = str(params.get("host") or "")
    if not host.startswith("/"):
        yield dsn
        return
    path = f"{host}/.s.PGSQL.{params.get('port') or 5432}"
    server = socket.create_server(("127.0.0.1", 0))

    def relay() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed: the test is over
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(path)
            except OSError:
                client.close()
                upstream.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    threading.Thread(target=relay, daemon=True).start()
    try:
        yield conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(server.getsockname()[1]))
    finally:
        server.close()


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def test_the_operator_and_a_worker_run_inside_the_image(
        control_plane: ControlPlane, dsn: str, client: Client, tmp_path: Path,
        image_root: rt.Image):
    with loopback_dsn(dsn) as pod_dsn, open_cluster(
            control_plane, namespace=f"t-{uuid.uuid4().hex[:10]}", dsn=pod_dsn,
            client=client, workdir=tmp_path, images=rt.Images(root=image_root)) as cluster:
        cluster.install()
        (operator,) = [p for p in cluster.kubelet.pods.values() if p.container == "operator"]
        assert operator.root == image_root.root
        assert operator.command[:2] == ["/usr/local/bin/jobwarden", "operator"]
        # In-cluster configuration, as in a real pod: no kubeconfig, the Service variables.
        assert "KUBECONFIG" not in operator.full_env
        assert operator.full_env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
        assert uid_of(operator.proc.pid) == 10001

        cluster.api.create(secret("db", cluster.namespace, pod_dsn))
        cluster.api.create(worker_pool("workers", cluster.namespace, "db"))
        cluster.wait(lambda: ((cluster.api.get("workerpools", "workers", cluster.namespace)
                               or {}).get("status") or {}).get("readyReplicas") == 1,
                     timeout=120, what="a ready worker in the image")
        (worker,) = [p for p in cluster.kubelet.pods.values()
                     if p.container == "worker" and not p.removed]
        assert worker.root == image_root.root and uid_of(worker.proc.pid) == 10001
        job = client.enqueue(testjobs.Record, {"in": "image"}).id
        cluster.wait(lambda: client.job(job).status is JobStatus.COMPLETED, timeout=60,
                     what="a job run by the worker in the image")
