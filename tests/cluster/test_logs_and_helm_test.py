"""``kubectl logs`` and ``helm test`` on the real control plane.

Issue 27: the process kubelet served no logs (``kubectl logs`` failed) and there was no
cluster DNS, so the chart's test hook -- a pod that reaches the operator's Service by
name -- could not pass. The kubelet now serves ``/containerLogs`` over HTTPS to the API
server, which checks its certificate and shows its own (tests/e2e/kubeletserver.py),
and its pods resolve Service names to the endpoint pod's port
(tests/e2e/clusterdns.py).
"""

from __future__ import annotations

import json

import pytest

from tests.cluster.conftest import OPERATOR_PODS, RealCluster

pytestmark = [pytest.mark.realkube, pytest.mark.slow]


def test_kubectl_logs_shows_what_the_operator_wrote(realkube: RealCluster):
    realkube.install()
    (pod,) = [p["metadata"]["name"] for p in realkube.pods(OPERATOR_PODS)]
    written = realkube.kubelet.process(pod).logs()
    assert written.strip()
    shown = realkube.kubectl("logs", pod, "-n", realkube.namespace)
    first = written.splitlines()[0]
    assert shown.startswith(first)
    last = realkube.kubectl("logs", pod, "-n", realkube.namespace, "--tail=1").strip()
    assert len(last.splitlines()) == 1 and last in realkube.kubelet.process(pod).logs()
    json.loads(first)  # the chart's default log format: one JSON object a line
    missing = realkube.kubectl.run("logs", pod, "-n", realkube.namespace, "-c", "nosuch",
                                   check=False)
    assert missing.returncode != 0


def test_helm_test_reaches_the_operator_by_its_service_name_and_passes(realkube: RealCluster):
    release = realkube.install()
    out = realkube.helm("test", release, "--namespace", realkube.namespace, "--logs",
                        "--timeout", "180s", timeout=240)
    assert "Phase:          Succeeded" in out or "Phase: Succeeded" in out.replace("  ", " ")
    # The hook's own output, fetched through the API server from the kubelet.
    assert "/healthz 200" in out and "/readyz 200" in out
    assert "schema: migration" in out  # `jobwarden status` with the release's DSN
    # Again: the finished pod of the first run is replaced, not in the way.
    again = realkube.helm("test", release, "--namespace", realkube.namespace, "--logs",
                          "--timeout", "180s", timeout=240)
    assert "/readyz 200" in again
