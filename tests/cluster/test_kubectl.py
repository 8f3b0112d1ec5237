"""kubectl against the real API server with the CRDs as shipped: the documented
examples apply, the printer columns read well, describe/explain work, and bad
specs are refused at apply time with the CRD's own message.

These are the places where kmock's emulator was more lenient than Kubernetes
(issue #13): a real server enforces CEL rules, enums, patterns and unknown
fields (kubectl's default field validation is Strict), and prints ``date``
columns relative to now (a future time prints ``<invalid>``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster
from tests.support import yamlio
from tests.support.kube import KubectlError

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "kubernetes.md"


def documented_examples() -> list[dict[str, Any]]:
    """Every jobwarden.io manifest in a yaml code block of docs/kubernetes.md."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    return [doc for block in blocks for doc in yamlio.load_all(block)
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("jobwarden.io/")]


def install_crds(realkube: RealCluster) -> None:
    realkube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    # Polled, not `kubectl wait`: that errors out while a new CRD has no conditions yet.
    for name in ("workerpools", "jobschedules", "exclusivejobs"):
        realkube.wait(lambda name=name: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in ((realkube.api.get("customresourcedefinitions", f"{name}.jobwarden.io",
                                        None) or {}).get("status") or {}).get("conditions")
            or []), timeout=60, what=f"{name} Established")


def into(realkube: RealCluster, manifest: dict[str, Any]) -> dict[str, Any]:
    moved = copy.deepcopy(manifest)
    moved["metadata"]["namespace"] = realkube.namespace
    return moved


def refused(realkube: RealCluster, manifest: dict[str, Any]) -> str:
    with pytest.raises(KubectlError) as caught:
        realkube.kubectl.apply(into(realkube, manifest))
    return caught.value.stderr


SCHEDULE = {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": "bad"},
            "spec": {"interval": "5m", "job": {"class": "app.jobs:Ping"}}}


def test_every_documented_example_applies_and_reads_back(realkube: RealCluster):
    install_crds(realkube)
    examples = documented_examples()
    assert {e["kind"] for e in examples} == {"JobSchedule", "ExclusiveJob", "WorkerPool"}
    for example in examples:
        out = realkube.kubectl.apply(into(realkube, example))
        assert "created" in out, out
    ns = realkube.namespace
    listed = realkube.kubectl("get", "jobwarden", "-n", ns)
    for example in examples:
        assert example["metadata"]["name"] in listed
    table = realkube.kubectl("get", "js", "-n", ns)
    header = table.splitlines()[0].split()
    assert header[:3] == ["NAME", "SCHEDULE", "INTERVAL"], table
    assert "<invalid>" not in table
    # Next Run is a future time: readable (an RFC 3339 time), never "<invalid>".
    realkube.api.patch("jobschedules", "nightly-invoices", {"status": {
        "nextRun": "2099-01-01T02:30:00Z", "lastSlot": "2020-01-01T02:30:00Z"}}, ns,
        subresource="status")
    table = realkube.kubectl("get", "js", "nightly-invoices", "-n", ns)
    assert "<invalid>" not in table and "2099-01-01T02:30:00Z" in table, table
    wide = realkube.kubectl("get", "js", "-n", ns, "-o", "wide")
    assert "billing.jobs:SendInvoices" in wide
    described = realkube.kubectl("describe", "wp", "billing-workers", "-n", ns)
    assert "Dsn Secret Ref" in described and "Max Surge" in described
    explained = realkube.kubectl("explain", "workerpool.spec.rollout")
    assert "maxSurge" in explained and "maxUnavailable" in explained
    explained = realkube.kubectl("explain", "jobschedule.spec.concurrencyPolicy")
    assert "Forbid" in explained
    # The scale subresource: kubectl scale works on a WorkerPool.
    realkube.kubectl("scale", "wp", "billing-workers", "-n", ns, "--replicas=5")
    pool = realkube.api.get("workerpools", "billing-workers", ns)
    assert pool is not None and pool["spec"]["replicas"] == 5


def test_invalid_specs_are_refused_at_apply_with_the_crd_message(realkube: RealCluster):
    install_crds(realkube)
    both = copy.deepcopy(SCHEDULE)
    both["spec"]["schedule"] = "*/5 * * * *"
    assert "set exactly one of spec.schedule" in refused(realkube, both)

    neither = copy.deepcopy(SCHEDULE)
    del neither["spec"]["interval"]
    assert "set exactly one of spec.schedule" in refused(realkube, neither)

    enum = copy.deepcopy(SCHEDULE)
    enum["spec"]["concurrencyPolicy"] = "Sometimes"
    message = refused(realkube, enum)
    assert "spec.concurrencyPolicy" in message and "Unsupported value" in message

    unknown = copy.deepcopy(SCHEDULE)
    unknown["spec"]["intervall"] = "5m"
    assert 'unknown field "spec.intervall"' in refused(realkube, unknown)

    interval = copy.deepcopy(SCHEDULE)
    interval["spec"]["interval"] = "5 minutes"
    assert "spec.interval" in refused(realkube, interval)

    cron = copy.deepcopy(SCHEDULE)
    del cron["spec"]["interval"]
    cron["spec"]["schedule"] = "every day at noon"
    assert "spec.schedule" in refused(realkube, cron)

    job_class = copy.deepcopy(SCHEDULE)
    job_class["spec"]["job"]["class"] = "not a class"
    assert "spec.job.class" in refused(realkube, job_class)

    pool = {"apiVersion": "jobwarden.io/v1alpha1", "kind": "WorkerPool",
            "metadata": {"name": "bad"},
            "spec": {"image": "app:1", "dsnSecretRef": {"name": "db"}, "replicas": -1}}
    assert "spec.replicas" in refused(realkube, pool)
    # spec.resources and spec.env have a Container's schema: a typo is refused, not dropped.
    limits = copy.deepcopy(pool)
    limits["spec"].update(replicas=1, resources={"limts": {"memory": "1Gi"}})
    assert 'unknown field "spec.resources.limts"' in refused(realkube, limits)
    env = copy.deepcopy(pool)
    env["spec"].update(replicas=1, env=[{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "kee": "k"}}}])
    assert "spec.env[0].valueFrom.secretKeyRef.kee" in refused(realkube, env)

    exclusive = {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
                 "metadata": {"name": "bad"},
                 "spec": {"job": {"class": "app.jobs:Migrate"}, "lease": {"onBusy": "wait"}}}
    assert "spec.lease.onBusy" in refused(realkube, exclusive)
    # Nothing of it was stored.
    assert realkube.kubectl("get", "jobwarden", "-n", realkube.namespace, "-o", "name") == ""


def test_immutable_fields_are_refused_on_update(realkube: RealCluster):
    install_crds(realkube)
    job = {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
           "metadata": {"name": "once"}, "spec": {"job": {"class": "app.jobs:Migrate"}}}
    realkube.kubectl.apply(into(realkube, job))
    changed = copy.deepcopy(job)
    changed["spec"]["job"]["class"] = "app.jobs:Other"
    message = refused(realkube, changed)
    assert "spec.job" in message and "immutable" in message.lower(), message
