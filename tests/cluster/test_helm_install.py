"""`helm install` of charts/jobwarden with the real Helm on a real control plane.

What kmock cannot show: the CRDs are accepted and become Established, the
Deployment controller turns the operator Deployment into a ReplicaSet and a
pod, and that pod runs `jobwarden operator` with its ServiceAccount's token
only -- so every API call the operator makes is checked against the chart's
RBAC by the real authorizer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.conftest import RealCluster, secret, worker_pool

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

CRDS = ("workerpools.jobwarden.io", "jobschedules.jobwarden.io", "exclusivejobs.jobwarden.io")


#: What a refused API call leaves in the operator's log: HTTP 403 or the reason.
FORBIDDEN = re.compile(r"(?<![\d.:])403(?!\d)|[Ff]orbidden")

def established(crd: dict) -> bool:
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def test_helm_install_runs_the_operator_under_its_service_account(realkube: RealCluster):
    release = realkube.install()
    for name in CRDS:
        crd = realkube.api.get("customresourcedefinitions", name, None)
        assert crd is not None and established(crd), name

    operator = f"{release}-jobwarden-operator"  # the chart's full name + "-operator"
    deployment = realkube.api.get("deployments", operator, realkube.namespace)
    assert deployment is not None
    assert deployment["status"].get("readyReplicas") == 1
    owned = [rs for rs in realkube.api.list("replicasets", realkube.namespace)
             if any(o["kind"] == "Deployment" and o["name"] == deployment["metadata"]["name"]
                    for o in rs["metadata"].get("ownerReferences") or [])]
    assert len(owned) == 1
    pods = realkube.pods("app.kubernetes.io/component=operator")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["ownerReferences"][0]["name"] == owned[0]["metadata"]["name"]
    assert pod["spec"]["nodeName"] == realkube.kubelet.node
    account = pod["spec"]["serviceAccountName"]
    assert account == operator
    assert pod["status"]["phase"] == "Running"
    # The process is `jobwarden operator`, and its credentials are the pod's token.
    process = realkube.kubelet.process(pod["metadata"]["name"])
    assert process.command[-1] == "operator"
    kubeconfig = process.env["KUBECONFIG"]
    assert "token" in Path(kubeconfig).read_text()

    # The operator works with only that RBAC: a pool it reconciles into a running worker.
    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    realkube.api.create(worker_pool("workers", realkube.namespace, "db"))

    def ready_worker() -> list[str]:
        return [p["metadata"]["name"] for p in realkube.pods("jobwarden.io/pool=workers")
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in (p.get("status") or {}).get("conditions") or [])]

    workers = realkube.wait(ready_worker, timeout=120, what="a ready worker pod")
    hosts = {h.name for h in realkube.client.hosts.status(pool="workers")}
    assert set(workers) <= hosts
    logs = realkube.operator_logs()
    # A status code, not any "403" (a fresh clone's run failed on "port 40371").
    assert not FORBIDDEN.search(logs), logs[-3000:]
