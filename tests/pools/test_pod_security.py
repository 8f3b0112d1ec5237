"""Every pod the operator builds is admitted at the ``restricted`` Pod Security level.

The checks follow the restricted profile of the Pod Security Standards, field by
field, for the pod and every container and init container: a namespace labelled
``pod-security.kubernetes.io/enforce: restricted`` would refuse the pod otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.controller.workerpools import spec as pools_spec

MINIMAL: dict[str, Any] = {"image": "example/app:1", "dsnSecretRef": {"name": "db"}}
#: Volume types the restricted level allows.
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What the restricted profile refuses in a pod spec (empty: admitted)."""
    found: list[str] = []
    pod = spec.get("securityContext") or {}
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        found.append("host namespaces")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    containers = [*(spec.get("initContainers") or []), *spec["containers"]]
    for container in containers:
        sc = container.get("securityContext") or {}
        where = container["name"]
        if sc.get("privileged"):
            found.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation not false")
        if (sc.get("runAsNonRoot", pod.get("runAsNonRoot"))) is not True:
            found.append(f"{where}: runAsNonRoot not true")
        if sc.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f"{where}: runAsUser 0")
        profile = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}: seccompProfile {profile}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{where}: capabilities not dropped")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{where}: capabilities added")
    return found


def built(spec: dict[str, Any]) -> dict[str, Any]:
    pool = pools_spec.parse_pool("p", spec)
    return pools_spec.pod_manifest(pool, name="p-x-y", namespace="ns", owner_uid="u")["spec"]


def test_the_checker_refuses_what_the_restricted_level_refuses() -> None:
    assert restricted_violations({"containers": [{"name": "c"}]})
    pod = built(MINIMAL)
    (worker,) = pod["containers"]
    del worker["securityContext"]["seccompProfile"]
    assert restricted_violations(pod) == []  # the pod-level profile covers it
    assert restricted_violations({**pod, "securityContext": {}}) == [
        "worker: seccompProfile None"]
    assert restricted_violations({**pod, "hostNetwork": True}) == ["host namespaces"]


def test_a_minimal_pool_builds_a_restricted_pod_without_an_api_token() -> None:
    pod = built(MINIMAL)
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (worker,) = pod["containers"]
    assert worker["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False


def test_a_template_s_own_values_win_and_the_missing_ones_are_filled() -> None:
    template = {"spec": {
        "automountServiceAccountToken": True,  # e.g. a job that calls the Kubernetes API
        "securityContext": {"runAsUser": 2000},
        "initContainers": [{"name": "migrate", "image": "example/app:1"}],
        "containers": [
            {"name": "worker", "securityContext": {"readOnlyRootFilesystem": False}},
            {"name": "proxy", "image": "example/proxy:1"},
        ]}}
    pod = built({**MINIMAL, "template": template})
    assert restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsUser"] == 2000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    by_name = {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}
    assert by_name["worker"]["securityContext"]["readOnlyRootFilesystem"] is False
    for name in ("migrate", "proxy"):
        assert by_name[name]["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name


@pytest.mark.parametrize("field", ["privileged", "allowPrivilegeEscalation"])
def test_an_explicitly_privileged_template_is_left_for_admission_to_judge(field: str) -> None:
    template = {"spec": {"containers": [{"name": "worker", "securityContext": {field: True}}]}}
    assert restricted_violations(built({**MINIMAL, "template": template})) != []


def test_worker_pods_let_the_cluster_autoscaler_remove_their_node_unless_told_not_to() -> None:
    pool = pools_spec.parse_pool("p", MINIMAL)
    meta = pools_spec.pod_manifest(pool, name="p-x-y", namespace="ns", owner_uid="u")["metadata"]
    assert meta["annotations"][pools_spec.SAFE_TO_EVICT_ANNOTATION] == "true"
    pinned = pools_spec.parse_pool("p", {**MINIMAL, "template": {"metadata": {"annotations": {
        pools_spec.SAFE_TO_EVICT_ANNOTATION: "false"}}}})
    meta = pools_spec.pod_manifest(pinned, name="p-x-y", namespace="ns", owner_uid="u")["metadata"]
    assert meta["annotations"][pools_spec.SAFE_TO_EVICT_ANNOTATION] == "false"
