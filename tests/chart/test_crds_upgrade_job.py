"""crds.upgradeJob: the opt-in hook that applies the chart's CRDs before an upgrade.

Helm installs a chart's crds/ on the first install only, so a `helm upgrade` would run
the new operator against the old CRDs. With the hook on, a pre-install/pre-upgrade Job
applies exactly the CRDs the chart ships (kubectl apply --server-side), with a
ServiceAccount that may touch nothing but them; off by default (the manual path is
docs/kubernetes.md's "Upgrading"). Running it on a real control plane is
tests/cluster/test_helm_upgrade.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helmchart import CHART, NAMESPACE, lint, manifests, render

from tests.support import yamlio

pytest.importorskip(
    "helm_python", reason="pip install helm-python-sdk (Helm's Go engine: render and lint)"
)

ON = {"crds": {"upgradeJob": {"enabled": True}}}
HOOK = "pre-install,pre-upgrade"


def hook_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "crds"]


def the(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in hook_objects(docs) if d["kind"] == kind]
    return found


def jobwarden_crds() -> dict[str, str]:
    """CRD name -> the text of its file in the chart's crds/ (group jobwarden.io)."""
    found = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        text = path.read_text()
        for doc in yamlio.load_all(text):
            if doc and doc["spec"]["group"] == "jobwarden.io":
                found[doc["metadata"]["name"]] = text
    return found


def test_the_hook_is_off_by_default() -> None:
    assert hook_objects(manifests(None)) == []


def test_the_notes_give_the_manual_path_or_name_the_hook() -> None:
    manual = render(None)["jobwarden/templates/NOTES.txt"]
    assert "kubectl apply --server-side --force-conflicts -f <this chart>/crds/" in manual
    assert "helm show crds" not in manual  # it applies only the last file's CRDs
    hooked = render(ON)["jobwarden/templates/NOTES.txt"]
    assert "crds.upgradeJob hook" in hooked and "kubectl apply" not in hooked


def test_the_job_applies_exactly_the_charts_jobwarden_crds_and_not_kopfs() -> None:
    docs = manifests(ON)
    job = the(docs, "Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = [*container["command"], *container["args"]]
    assert args[:4] == ["kubectl", "apply", "--server-side", "--force-conflicts"]
    # The same field manager as the manual path (kubectl's default), so they never conflict.
    assert "--field-manager=kubectl" in args
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert args[args.index("-f") + 1] == mounts["crds"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "crds"]
    (config,) = [d for d in hook_objects(docs) if d["kind"] == "ConfigMap"]
    assert volume["configMap"] == {"name": config["metadata"]["name"]}

    # What the Job sees under /crds is what `helm show crds` gives for jobwarden.io, as
    # compact JSON (the same objects in half the bytes: the YAML files together are over
    # a ConfigMap's 1 MiB); kopf's peering CRDs are never replaced (a cluster may have
    # kopf's own).
    shipped: dict[str, Any] = {}
    for key, text in config["data"].items():
        assert key.endswith(".json"), key  # kubectl reads a directory's .json files
        doc = json.loads(text)
        shipped[doc["metadata"]["name"]] = doc
    expected = jobwarden_crds()
    assert set(shipped) == set(expected) == {
        "workerpools.jobwarden.io", "jobschedules.jobwarden.io", "exclusivejobs.jobwarden.io"}
    for name, text in expected.items():
        assert shipped[name] == yamlio.load(text), name
    # The ConfigMap stays under the API server's 1 MiB object limit.
    assert len(json.dumps(config).encode()) < 1024 * 1024


def test_the_hook_is_five_objects() -> None:
    """Helm creates, waits for and deletes hook objects one at a time and records the
    release after each: on a loaded control plane each cost 20-40 s (seven of them timed
    the real-plane upgrade test out). The least a pod applying CRDs needs: its account,
    a ClusterRole and binding, the CRDs and the Job."""
    assert sorted(d["kind"] for d in hook_objects(manifests(ON))) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job", "ServiceAccount"]


def test_the_service_account_may_create_and_patch_only_these_crds() -> None:
    docs = manifests(ON)
    job = the(docs, "Job")
    account = the(docs, "ServiceAccount")["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == account
    binding = the(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": NAMESPACE}]
    role = the(docs, "ClusterRole")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    # RBAC cannot name the object of a create; everything else is by name.
    assert role["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["create"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": sorted(jobwarden_crds()), "verbs": ["get", "patch"]},
    ]
    # Not the operator's ServiceAccount: that one keeps its read-only CRD rule.
    assert account != job["metadata"]["name"].removesuffix("-crds") + "-operator"


def test_every_hook_object_runs_before_the_release_changes_and_goes_after() -> None:
    objects = hook_objects(manifests(ON))
    assert {d["kind"] for d in objects} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job"}
    weights = {}
    for doc in objects:
        notes = doc["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == HOOK, doc["metadata"]["name"]
        # Kept when it failed (kubectl logs), replaced by the next attempt.
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[doc["kind"]] = int(notes["helm.sh/hook-weight"])
    assert all(weights["Job"] > w for kind, w in weights.items() if kind != "Job"), weights


def test_the_job_is_bounded_and_its_image_follows_the_cluster_or_the_values() -> None:
    job = the(manifests(ON), "Job")
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["activeDeadlineSeconds"] == 300
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    # Default: kubectl of the cluster's own version (build metadata such as +k3s1 dropped).
    assert re.fullmatch(r"registry\.k8s\.io/kubectl:v\d+\.\d+\.\d+",
                        pod["containers"][0]["image"])

    def image(**values: Any) -> str:
        docs = manifests({"crds": {"upgradeJob": {"enabled": True, "image": values}}})
        return str(the(docs, "Job")["spec"]["template"]["spec"]["containers"][0]["image"])

    assert image(tag="1.31.0") == "registry.k8s.io/kubectl:1.31.0"
    assert image(registry="mirror.example/", repository="tools/kubectl", tag="v1") \
        == "mirror.example/tools/kubectl:v1"
    assert image(digest="sha256:" + "a" * 64) == "registry.k8s.io/kubectl@sha256:" + "a" * 64


@pytest.mark.parametrize("values", [
    {"crds": {"upgradeJob": {"enable": True}}},
    {"crds": {"upgradeJob": {"enabled": "yes"}}},
    {"crds": {"upgradeJob": {"enabled": True, "backoffLimit": -1}}},
    {"crds": {"upgradeJob": {"enabled": True, "image": {"pullPolicy": "Sometimes"}}}},
], ids=["typo", "not-a-boolean", "negative-retries", "bad-pull-policy"])
def test_the_values_are_checked(values: dict[str, Any]) -> None:
    report = lint(values)
    assert any(m["severity"] >= 3 and "schema" in m["error"] for m in report["messages"])
