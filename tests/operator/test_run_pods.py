"""runpods.py and the pod-run part of specs.py: the pod of one claimed run, pure."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from jobwarden.controller import specs
from jobwarden.controller.podruns import pods as runpods
from jobwarden.controller.workerpools import spec as pools_spec

OWNER = runpods.Owner(kind="JobSchedule", namespace="team-a", name="nightly-export",
                      uid="0b7f6a52-5e2c-4a53-9d3a-2f1e0c3b8d11")
SLOT = dt.datetime(2026, 11, 30, 4, 0, tzinfo=dt.UTC)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pod_run(**changes: Any) -> specs.PodRunSpec:
    spec: dict[str, Any] = {
        "interval": "5m", "job": {"class": "billing.jobs:Export"},
        "podTemplate": {"metadata": {"labels": {"team": "billing"}},
                        "spec": {"containers": [{"name": "job", "image": "billing/jobs:7"}]}},
        "dsnSecretRef": {"name": "jobwarden-dsn"},
    }
    spec.update(changes)
    parsed = specs.parse_job_schedule({k: v for k, v in spec.items() if v is not None})
    assert parsed.pod_run is not None
    return parsed.pod_run


def run(**changes: Any) -> runpods.Run:
    values: dict[str, Any] = {"job_id": 42, "attempt": 1, "claim_token": "c-0123",
                              "slot": SLOT}
    values.update(changes)
    return runpods.Run(**values)


def manifest(spec: specs.PodRunSpec | None = None, **changes: Any) -> dict[str, Any]:
    return runpods.pod_manifest(spec or pod_run(), owner=OWNER, run=run(**changes),
                                claimed_at=1764475200.5)


def env_of(pod: dict[str, Any], container: str = "job") -> dict[str, Any]:
    found = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in found["env"]}


# --- spec parsing -------------------------------------------------------------------------


def test_a_spec_without_a_pod_template_runs_in_worker_pools() -> None:
    assert specs.parse_job_schedule({"interval": "5m", "job": {"class": "a.b:C"}}).pod_run \
        is None
    assert specs.parse_exclusive_job({"job": {"class": "a.b:C"}}).pod_run is None


def test_a_pod_template_gets_the_documented_defaults() -> None:
    parsed = pod_run()
    assert parsed.dsn_secret == "jobwarden-dsn" and parsed.dsn_key == "dsn"
    assert parsed.start_deadline_seconds == specs.DEFAULT_START_DEADLINE == 300
    exclusive = specs.parse_exclusive_job({
        "job": {"class": "a.b:C"}, "startDeadlineSeconds": 60,
        "podTemplate": {"spec": {"containers": [{"name": "x", "image": "i:1"}]}},
        "dsnSecretRef": {"name": "s", "key": "url"}})
    assert exclusive.pod_run == specs.PodRunSpec(
        template={"spec": {"containers": [{"name": "x", "image": "i:1"}]}}, dsn_secret="s",
        dsn_key="url", start_deadline_seconds=60)


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"dsnSecretRef": None}, "dsnSecretRef.name", "is required with spec.podTemplate"),
    ({"podTemplate": {"metadata": {}}}, "podTemplate.spec", "is required"),
    ({"podTemplate": {"spec": {"containers": []}}}, "podTemplate.spec.containers",
     "at least one container"),
    ({"podTemplate": {"spec": {"containers": [{"name": "job"}]}}},
     "podTemplate.spec.containers", "needs an image"),
    ({"podTemplate": {"spec": {"restartPolicy": "OnFailure",
                               "containers": [{"name": "job", "image": "i"}]}}},
     "podTemplate.spec.restartPolicy", "must be Never"),
    ({"startDeadlineSeconds": 5}, "startDeadlineSeconds", "at least 10"),
    ({"podTemplate": "pod"}, "podTemplate", "must be an object"),
], ids=["no-secret", "no-spec", "no-containers", "no-image", "restart-policy", "deadline",
        "not-an-object"])
def test_a_bad_pod_run_spec_is_refused_naming_the_field(changes: dict[str, Any], field: str,
                                                        message: str) -> None:
    with pytest.raises(specs.SpecError, match=re.escape(message)) as caught:
        pod_run(**changes)
    assert caught.value.field == field


def test_pod_run_names_the_resource_without_a_cluster() -> None:
    assert OWNER.pod_run == "JobSchedule/team-a/nightly-export"


# --- the name -----------------------------------------------------------------------------


def test_the_name_is_resource_slot_and_attempt_and_the_same_for_the_same_claim() -> None:
    assert runpods.pod_name(OWNER, run()) == "nightly-export-20261130t040000-1"
    assert runpods.pod_name(OWNER, run()) == runpods.pod_name(OWNER, run(claim_token="other"))
    assert runpods.pod_name(OWNER, run(attempt=2)) == "nightly-export-20261130t040000-2"


def test_a_run_without_a_slot_is_named_after_its_job() -> None:
    owner = runpods.Owner(kind="ExclusiveJob", namespace="a", name="migrate-42", uid="u")
    assert runpods.pod_name(owner, run(slot=None, job_id=9001, attempt=3)) == \
        "migrate-42-j9001-3"


def test_a_slot_in_another_zone_is_named_in_utc() -> None:
    berlin = dt.timezone(dt.timedelta(hours=1))
    assert runpods.pod_name(OWNER, run(slot=SLOT.astimezone(berlin))) == \
        "nightly-export-20261130t040000-1"


@pytest.mark.parametrize("name", ["a" * 253, "x." * 100 + "y", "Upper.Case.Name", "-a-"])
def test_every_name_is_a_dns_label_of_at_most_63(name: str) -> None:
    owner = runpods.Owner(kind="JobSchedule", namespace="n", name=name, uid="u")
    for attempt in (1, 1000):
        got = runpods.pod_name(owner, run(attempt=attempt, job_id=2**40, slot=None))
        assert len(got) <= 63 and DNS_LABEL.match(got), got
        assert got.endswith(f"-j{2**40}-{attempt}")


def test_two_long_names_that_share_a_prefix_get_different_pods() -> None:
    first = runpods.Owner(kind="JobSchedule", namespace="n", name="p" * 80 + "-one", uid="u1")
    second = runpods.Owner(kind="JobSchedule", namespace="n", name="p" * 80 + "-two", uid="u2")
    assert runpods.pod_name(first, run()) != runpods.pod_name(second, run())


# --- the manifest -------------------------------------------------------------------------


def test_the_pod_is_owned_by_the_resource_and_labelled_by_run() -> None:
    pod = manifest()
    meta = pod["metadata"]
    assert meta["name"] == "nightly-export-20261130t040000-1"
    assert meta["namespace"] == "team-a"
    assert meta["ownerReferences"] == [{
        "apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
        "name": "nightly-export", "uid": OWNER.uid, "controller": True,
        "blockOwnerDeletion": True}]
    assert meta["labels"] == {
        "team": "billing", "app.kubernetes.io/part-of": "jobwarden",
        "app.kubernetes.io/component": "job-run", "app.kubernetes.io/name": "jobwarden",
        "app.kubernetes.io/instance": "nightly-export",
        runpods.POD_RUN_LABEL: OWNER.uid, runpods.JOB_ID_LABEL: "42",
        runpods.ATTEMPT_LABEL: "1", runpods.KIND_LABEL: "JobSchedule",
        runpods.OWNER_LABEL: "nightly-export"}
    assert meta["annotations"][runpods.POD_RUN_ANNOTATION] == \
        "JobSchedule/team-a/nightly-export"
    assert float(meta["annotations"][runpods.CLAIMED_AT_ANNOTATION]) == 1764475200.5
    assert runpods.run_of(pod) == (42, 1)
    assert runpods.run_of({"metadata": {"labels": {}}}) is None


def test_the_template_s_own_labels_are_kept_and_the_operator_s_win_only_where_it_must(
        ) -> None:
    template = {"metadata": {"labels": {
        "app.kubernetes.io/name": "billing-export", "app.kubernetes.io/instance": "prod",
        "app.kubernetes.io/component": "mine", runpods.JOB_ID_LABEL: "7"}},
        "spec": {"containers": [{"name": "job", "image": "billing/jobs:7"}]}}
    labels = manifest(pod_run(podTemplate=template))["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "billing-export"
    assert labels["app.kubernetes.io/instance"] == "prod"
    # What the operator finds its pods by cannot be overridden.
    assert labels["app.kubernetes.io/component"] == "job-run"
    assert labels[runpods.JOB_ID_LABEL] == "42"
    assert labels[runpods.OWNER_LABEL] == "nightly-export"


def test_a_long_owner_name_is_a_valid_label_value() -> None:
    owner = runpods.Owner(kind="ExclusiveJob", namespace="n", name="x" * 200, uid="u")
    pod = runpods.pod_manifest(pod_run(), owner=owner, run=run(), claimed_at=0.0)
    value = pod["metadata"]["labels"][runpods.OWNER_LABEL]
    assert len(value) <= 63 and DNS_LABEL.match(value), value
    other = runpods.Owner(kind="ExclusiveJob", namespace="n", name="x" * 199 + "y", uid="v")
    assert runpods.pod_manifest(pod_run(), owner=other, run=run(), claimed_at=0.0)[
        "metadata"]["labels"][runpods.OWNER_LABEL] != value


def test_the_pod_never_restarts_and_hands_in_the_claim() -> None:
    pod = manifest()
    assert pod["spec"]["restartPolicy"] == "Never"
    env = env_of(pod)
    assert env["JOBWARDEN_JOB_ID"] == "42"
    assert env["JOBWARDEN_CLAIM_TOKEN"] == "c-0123"
    assert "JOBWARDEN_LEASE_TOKEN" not in env
    assert env["JOBWARDEN_DSN_FILE"] == f"{pools_spec.DSN_MOUNT}/dsn"
    assert env["JOBWARDEN_HOST"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env_of(manifest(lease_token=17))["JOBWARDEN_LEASE_TOKEN"] == "17"


def test_the_dsn_secret_is_mounted_as_a_worker_pool_mounts_it() -> None:
    pod = manifest(pod_run(dsnSecretRef={"name": "db", "key": "url"}))
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == pools_spec.DSN_VOLUME)
    assert volume["secret"] == {"secretName": "db", "items": [{"key": "url", "path": "url"}]}
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"]
                 if m["name"] == pools_spec.DSN_VOLUME)
    assert mount == {"name": pools_spec.DSN_VOLUME, "mountPath": pools_spec.DSN_MOUNT,
                     "readOnly": True}
    assert env_of(pod)["JOBWARDEN_DSN_FILE"] == f"{pools_spec.DSN_MOUNT}/url"
    assert "JOBWARDEN_DSN" not in env_of(pod)  # never as a value


def test_without_a_command_the_job_container_runs_jobwarden_run_job() -> None:
    assert manifest()["spec"]["containers"][0]["command"] == ["jobwarden", "run-job"]
    own = pod_run(podTemplate={"spec": {"containers": [
        {"name": "job", "image": "i", "command": ["python", "-m", "myapp.run"]}]}})
    assert manifest(own)["spec"]["containers"][0]["command"] == ["python", "-m", "myapp.run"]
    args = pod_run(podTemplate={"spec": {"containers": [
        {"name": "job", "image": "i", "args": ["run-job", "--verbose"]}]}})
    assert "command" not in manifest(args)["spec"]["containers"][0]


def test_the_container_named_job_runs_the_job_even_when_it_is_not_first() -> None:
    spec = pod_run(podTemplate={"spec": {"containers": [
        {"name": "proxy", "image": "proxy:1"}, {"name": "job", "image": "jobs:1"}]}})
    pod = manifest(spec)
    assert "JOBWARDEN_CLAIM_TOKEN" in env_of(pod, "job")
    assert "env" not in pod["spec"]["containers"][0]


def test_restricted_security_defaults_unless_the_template_says_otherwise() -> None:
    pod = manifest()
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    context = pod["spec"]["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    own = pod_run(podTemplate={"spec": {
        "automountServiceAccountToken": True, "serviceAccountName": "exporter",
        "securityContext": {"runAsUser": 1234},
        "containers": [{"name": "job", "image": "i",
                        "securityContext": {"readOnlyRootFilesystem": False}}]}})
    pod = manifest(own)
    assert pod["spec"]["automountServiceAccountToken"] is True
    assert pod["spec"]["serviceAccountName"] == "exporter"
    assert pod["spec"]["securityContext"]["runAsUser"] == 1234
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False


def test_the_template_is_not_changed_by_building_a_pod() -> None:
    spec = pod_run()
    before = repr(spec.template)
    manifest(spec)
    manifest(spec, attempt=2)
    assert repr(spec.template) == before


def test_an_env_var_the_operator_owns_is_refused() -> None:
    template = {"spec": {"containers": [
        {"name": "job", "image": "i", "env": [{"name": "JOBWARDEN_CLAIM_TOKEN", "value": "x"}]}]}}
    with pytest.raises(specs.SpecError, match="JOBWARDEN_CLAIM_TOKEN is set by the operator"):
        pod_run(podTemplate=template)
    unchecked = specs.PodRunSpec(template=template, dsn_secret="s", dsn_key="dsn",
                                 start_deadline_seconds=60)
    with pytest.raises(specs.SpecError, match="JOBWARDEN_CLAIM_TOKEN is set by the operator"):
        manifest(unchecked)
