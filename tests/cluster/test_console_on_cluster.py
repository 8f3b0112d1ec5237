"""The chart's console on a real control plane: installed, running, token-protected, read-only.

`helm install` with ``console.enabled``: the Deployment controller starts the
console pod, the process kubelet runs `jobwarden console` from the pod spec
(the DSN and the generated token mounted as files, no ServiceAccount token),
its TCP readiness probe makes it Ready, and over HTTP it asks for the token,
serves the pages with it, and refuses every action (read-only by default).
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import pytest

from tests.cluster.conftest import RealCluster

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def _call(url: str, *, token: str | None = None, data: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data)
    if token is not None:
        auth = base64.b64encode(f"ops:{token}".encode()).decode()
        request.add_header("Authorization", f"Basic {auth}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_chart_runs_a_read_only_console_behind_its_token(realkube: RealCluster) -> None:
    release = realkube.install(values=realkube.base_values(console={"enabled": True}))
    name = f"{release}-jobwarden-console"
    deployment = realkube.wait(
        lambda: (d := realkube.api.get("deployments", name, realkube.namespace))
        and d.get("status", {}).get("readyReplicas") == 1 and d,
        timeout=120, what="the console Deployment ready")
    assert deployment["spec"]["replicas"] == 1
    (pod,) = realkube.pods("app.kubernetes.io/component=console")
    assert pod["spec"]["automountServiceAccountToken"] is False
    process = realkube.kubelet.process(pod["metadata"]["name"])
    assert "--read-only" in process.command  # read-only unless console.readOnly=false
    assert "KUBECONFIG" not in process.env  # no Kubernetes credentials at all
    secret = realkube.api.get("secrets", name, realkube.namespace)
    assert secret is not None
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) >= 16
    url = f"http://127.0.0.1:{process.ports['http']}"

    assert _call(url + "/")[0] == 401
    assert _call(url + "/", token="wrong-token-wrong-token")[0] == 401
    status, page = _call(url + "/", token=token)
    assert status == 200 and "Overview" in page and "read-only" in page
    status, page = _call(url + "/schedules", token=token)
    assert status == 200
    refused, _ = _call(url + "/actions/pause-queue", token=token, data=b"queue=default")
    assert refused == 403
    service = realkube.api.get("services", name, realkube.namespace)
    assert service is not None and service["spec"]["ports"][0]["port"] == 8787
