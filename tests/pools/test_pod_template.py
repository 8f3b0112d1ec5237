"""WorkerPool spec -> the worker pod: contract fields, versions, and refused specs (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.controller.specs import SpecError
from jobwarden.controller.workerpools import reconciler as pools
from jobwarden.controller.workerpools import spec as pools_spec

BASE: dict[str, Any] = {"image": "example/app:1.4.2", "replicas": 2, "queues": ["a", "b"],
                        "concurrency": 5, "hostCap": 3, "apps": ["tests.support.testjobs"],
                        "dsnSecretRef": {"name": "db", "key": "url"},
                        "drainTimeoutSeconds": 30, "httpPort": 9000}


def worker_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in manifest["spec"]["containers"] if c["name"] == "worker")


def env_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in worker_of(manifest)["env"]}


def test_the_pod_carries_the_worker_contract():
    spec = pools_spec.parse_pool("billing", BASE)
    pod = pools_spec.pod_manifest(spec, name="billing-abc-xyz", namespace="ns", owner_uid="u1")
    env = env_of(pod)
    assert env["JOBWARDEN_POOL"] == "billing"
    assert env["JOBWARDEN_QUEUES"] == "a,b" and env["JOBWARDEN_CONCURRENCY"] == "5"
    assert env["JOBWARDEN_HOST_CAP"] == "3" and env["JOBWARDEN_APPS"] == "tests.support.testjobs"
    assert env["JOBWARDEN_HTTP_PORT"] == "9000" and env["JOBWARDEN_SHUTDOWN_GRACE"] == "30"
    assert env["JOBWARDEN_CODE_VERSION"] == "1.4.2"
    assert env["JOBWARDEN_HOST"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["JOBWARDEN_DSN_FILE"] == f"{pools_spec.DSN_MOUNT}/url"
    assert "JOBWARDEN_DSN" not in env
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == pools_spec.DSN_VOLUME)
    assert volume["secret"] == {"secretName": "db", "items": [{"key": "url", "path": "url"}]}
    worker = worker_of(pod)
    assert worker["command"] == ["jobwarden", "worker"]
    assert worker["ports"][0] == {"name": "http", "containerPort": 9000, "protocol": "TCP"}
    assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 30
    labels = pod["metadata"]["labels"]
    assert labels["jobwarden.io/pool"] == "billing"
    assert labels["app.kubernetes.io/component"] == "worker"
    assert labels[pools_spec.HASH_LABEL] == spec.template_hash
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True


def test_the_template_s_own_labels_are_kept_beside_the_operator_s():
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "billing-worker",
                                        "team": "billing",
                                        "app.kubernetes.io/component": "mine",
                                        pools_spec.POOL_LABEL: "other"}}}
    spec = pools_spec.parse_pool("billing", {**BASE, "template": template})
    labels = pools_spec.pod_manifest(spec, name="b-1", namespace="ns",
                                     owner_uid="u1")["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "billing-worker"
    assert labels["team"] == "billing"
    assert labels["app.kubernetes.io/instance"] == "billing"
    # The chart's PodMonitor, Service and budgets select on these: the operator's win.
    assert labels["app.kubernetes.io/component"] == "worker"
    assert labels["app.kubernetes.io/part-of"] == "jobwarden"
    assert labels[pools_spec.POOL_LABEL] == "billing"
    plain = pools_spec.pod_manifest(pools_spec.parse_pool("billing", BASE), name="b-2",
                                    namespace="ns", owner_uid="u1")["metadata"]["labels"]
    assert plain["app.kubernetes.io/name"] == "jobwarden"
    assert plain["app.kubernetes.io/instance"] == "billing"
    instance = {"metadata": {"labels": {"app.kubernetes.io/instance": "billing-eu"}}}
    assert pools_spec.pod_manifest(
        pools_spec.parse_pool("billing", {**BASE, "template": instance}), name="b-3",
        namespace="ns", owner_uid="u1")["metadata"]["labels"][
        "app.kubernetes.io/instance"] == "billing-eu"


def test_a_template_change_is_a_new_version_and_scaling_is_not():
    base = pools_spec.parse_pool("p", BASE)
    assert pools_spec.parse_pool("p", {**BASE, "replicas": 9}).template_hash == base.template_hash
    assert pools_spec.parse_pool("p", {**BASE, "rollout": {"maxSurge": 3}}).template_hash \
        == base.template_hash
    for change in ({"image": "example/app:1.4.3"}, {"codeVersion": "x"}, {"concurrency": 6},
                   {"env": [{"name": "A", "value": "1"}]}):
        assert pools_spec.parse_pool("p", {**BASE, **change}).template_hash != base.template_hash


def test_the_code_version_defaults_to_the_tag_then_the_template_hash():
    assert pools_spec.parse_pool("p", {**BASE, "codeVersion": "v9"}).code_version == "v9"
    untagged = pools_spec.parse_pool("p", {**BASE, "image": "example/app"})
    assert untagged.code_version == untagged.template_hash


def test_a_full_template_keeps_its_own_fields_and_gets_the_operator_s():
    spec = pools_spec.parse_pool("gpu", {"dsnSecretRef": {"name": "db"}, "template": {
        "metadata": {"annotations": {"team": "ml"}},
        "spec": {"nodeSelector": {"gpu": "yes"},
                 "containers": [{"name": "side", "image": "s"},
                                {"name": "worker", "image": "ml:2.0"}]}}})
    pod = pools_spec.pod_manifest(spec, name="gpu-1", namespace="ns", owner_uid="u")
    assert pod["spec"]["nodeSelector"] == {"gpu": "yes"}
    assert pod["metadata"]["annotations"]["team"] == "ml"
    assert env_of(pod)["JOBWARDEN_DSN_FILE"].endswith("/dsn")
    assert "env" not in pod["spec"]["containers"][0]


@pytest.mark.parametrize("spec, field", [
    ({**BASE, "dsnSecretRef": None}, "dsnSecretRef.name"),
    ({**BASE, "image": None}, "image"),
    ({**BASE, "rollout": {"maxSurge": 0, "maxUnavailable": 0}}, "rollout"),
    ({**BASE, "replicas": -1}, "replicas"),
    ({**BASE, "env": [{"name": "JOBWARDEN_POOL", "value": "other"}]}, "env"),
])
def test_refused_specs_name_the_field(spec: dict[str, Any], field: str):
    with pytest.raises(SpecError) as caught:
        pools_spec.parse_pool("p", spec)
    assert caught.value.field == field


@pytest.mark.parametrize("spec, field", [
    # The spec's own fields are checked before the template, the template before its
    # worker container's image, the image before the environment.
    ({**BASE, "replicas": -1, "template": "not an object"}, "replicas"),
    ({**BASE, "image": None, "template": "not an object"}, "template"),
    ({**BASE, "image": None, "env": [{"name": "JOBWARDEN_POOL", "value": "x"}]}, "image"),
    ({**BASE, "template": {"spec": {"containers": "worker"}}, "isolation": "fiber"},
     "isolation"),
])
def test_a_spec_with_several_faults_names_the_first_in_reading_order(
        spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        pools_spec.parse_pool("p", spec)
    assert caught.value.field == field


def test_pod_names_are_host_names_that_show_the_version():
    spec = pools_spec.parse_pool("p" * 80, BASE)
    name = pools_spec.pod_name(spec)
    assert len(name) <= 63 and f"-{spec.template_hash[:5]}-" in name


def test_pod_view_reads_readiness_drain_and_deletion():
    view = pools.pod_view({
        "metadata": {"name": "x", "labels": {pools_spec.HASH_LABEL: "h"},
                     "annotations": {pools_spec.DRAIN_STARTED_ANNOTATION: "12.5",
                                     pools_spec.DRAIN_REASON_ANNOTATION: "scale-down"},
                     "creationTimestamp": "2024-01-01T00:00:00Z",
                     "deletionTimestamp": "2024-01-01T00:01:00Z"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert (view.template_hash, view.ready, view.terminating) == ("h", True, True)
    assert (view.drain_started, view.drain_reason) == (12.5, "scale-down")
    pending = pools.pod_view({"metadata": {"name": "y"}, "status": {"phase": "Pending"}})
    assert not pending.ready and pending.drain_started is None


def test_the_pool_interval_comes_from_the_environment():
    assert pools.pool_interval({}) == 2.0
    assert pools.pool_interval({"JOBWARDEN_POOL_INTERVAL": "0.5"}) == 0.5
