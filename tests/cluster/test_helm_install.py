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

from tests.cluster.conftest import (
    CHART,
    OPERATOR_PODS,
    RealCluster,
    pod_ready,
    secret,
    worker_pool,
)

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
    pods = realkube.pods(OPERATOR_PODS)
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
                if pod_ready(p)]

    workers = realkube.wait(ready_worker, timeout=120, what="a ready worker pod")
    hosts = {h.name for h in realkube.client.hosts.status(pool="workers")}
    assert set(workers) <= hosts
    logs = realkube.operator_logs()
    # A status code, not any "403" (a fresh clone's run failed on "port 40371").
    assert not FORBIDDEN.search(logs), logs[-3000:]


def test_the_default_install_grants_secrets_only_in_the_release_namespace(
        realkube: RealCluster) -> None:
    """Issue 27: the default (cluster-wide) install granted ``get secrets`` in every
    namespace. Now only in the release's (``rbac.secretNamespaces``), asked of the real
    authorizer as the operator's ServiceAccount. No operator runs (``replicas: 0``): a
    cluster-wide one would watch the other tests' namespaces on this control plane."""
    values = realkube.base_values()
    values["operator"] = {**values["operator"], "watchNamespaces": [], "replicas": 0}
    release = realkube.install(values=values, wait=False)
    try:
        account = (f"--as=system:serviceaccount:{realkube.namespace}:"
                   f"{release}-jobwarden-operator")

        def can(verb: str, resource: str, namespace: str) -> bool:
            answer = realkube.kubectl.run("auth", "can-i", verb, resource, "-n", namespace,
                                          account, check=False)
            assert answer.stdout.strip() in ("yes", "no"), answer
            return answer.stdout.strip() == "yes"

        assert can("get", "secrets", realkube.namespace)
        assert not can("get", "secrets", "default")
        assert not can("get", "secrets", "kube-system")
        # Cluster-wide, as before: what the operator watches.
        assert can("watch", "workerpools.jobwarden.io", "default")
    finally:
        realkube.releases.remove(release)
        realkube.helm("uninstall", release, "--namespace", realkube.namespace, timeout=120)


MONITORS = ("podmonitors", "servicemonitors", "prometheusrules")


def test_the_documented_install_with_monitors_works_without_prometheus_operator(
        realkube: RealCluster):
    """Issue 27: ``no matches for kind "PodMonitor"`` failed the install on a cluster
    without prometheus-operator. The real API server serves no monitoring.coreos.com
    here; Helm asks it (``.Capabilities``), renders none of them, and says so."""
    values = realkube.base_values(
        metrics={"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}},
        prometheusRule={"enabled": True})
    release = realkube.install(values=values)
    notes = realkube.helm("get", "notes", release, "--namespace", realkube.namespace)
    assert "Not created: PodMonitor, PrometheusRule, ServiceMonitor" in notes
    manifest = realkube.helm("get", "manifest", release, "--namespace", realkube.namespace)
    assert "monitoring.coreos.com" not in manifest


def test_an_install_or_upgrade_without_a_dsn_fails_before_anything_is_created(
        realkube: RealCluster):
    """Issue 27: an install without database.dsn/existingSecret left the operator in
    ContainerCreating forever; an upgrade without the install's values silently dropped
    existingSecret. Both now fail at render time, with the way out in the message."""
    values = realkube.base_values()
    values["database"] = {}
    path = realkube.values_file(values, "no-dsn.yaml")
    failed = realkube.helm.run("install", "no-dsn", str(CHART), "--namespace",
                               realkube.namespace, "-f", str(path), check=False)
    assert failed.returncode != 0
    assert "database.existingSecret (a Secret holding the DSN) or database.dsn is required" \
        in failed.stderr
    assert realkube.api.list("deployments", realkube.namespace) == []

    realkube.api.create(secret("db", realkube.namespace, realkube.dsn))
    installed = realkube.base_values()
    installed["database"] = {"existingSecret": "db"}
    release = realkube.install(values=installed, wait=False)
    dropped = realkube.helm.run("upgrade", release, str(CHART), "--namespace",
                                realkube.namespace, "--set", "image.pullPolicy=Always",
                                check=False)
    assert dropped.returncode != 0 and "--reset-then-reuse-values" in dropped.stderr
    # The documented safe way keeps what the install was given.
    realkube.helm("upgrade", release, str(CHART), "--namespace", realkube.namespace,
                  "--reset-then-reuse-values", "--set", "image.pullPolicy=Always")
    kept = realkube.helm.json("get", "values", release, "--namespace", realkube.namespace)
    assert kept["database"]["existingSecret"] == "db"
