"""The CRDs in crds/ are valid structural schemas that accept what the docs
show and refuse bad specs with a clear message, before the operator sees them."""

from __future__ import annotations

import copy
import re
from typing import Any

import crdschema
import pytest
from crdschema import ROOT, admit, load_crds, resolve_json_path, schema_of, structural_errors

from tests.support import yamlio

pytest.importorskip("jsonschema", reason="pip install jsonschema (validates the OpenAPI schemas)")
pytest.importorskip("celpy", reason="pip install cel-python (evaluates the CRDs' CEL rules)")

CRDS = load_crds()
KINDS = ["WorkerPool", "JobSchedule", "ExclusiveJob"]
DOCS = ROOT / "docs" / "kubernetes.md"


def documented_examples() -> list[dict[str, Any]]:
    """Every jobwarden.io manifest in a yaml code block of docs/kubernetes.md."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    found = []
    for block in blocks:
        for doc in yamlio.load_all(block):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("jobwarden.io/"):
                found.append(doc)
    return found


def minimal(kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "JobSchedule": {"interval": "5m", "job": {"class": "app.jobs:Ping"}},
        "ExclusiveJob": {"job": {"class": "app.jobs:Migrate"}},
        "WorkerPool": {"image": "app:1.0", "dsnSecretRef": {"name": "db"}},
    }[kind]
    return {
        "apiVersion": "jobwarden.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": copy.deepcopy(spec),
    }


def with_spec(kind: str, **changes: Any) -> dict[str, Any]:
    obj = minimal(kind)
    for key, value in changes.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


# --- shape of the CRDs ------------------------------------------------------------------


def test_all_three_kinds_exist_in_one_group_version_and_category() -> None:
    assert sorted(CRDS) == sorted(KINDS)
    for kind, crd in CRDS.items():
        spec = crd["spec"]
        assert spec["group"] == "jobwarden.io"
        assert crd["metadata"]["name"] == f"{spec['names']['plural']}.jobwarden.io"
        assert [v["name"] for v in spec["versions"]] == ["v1alpha1"], kind
        assert "jobwarden" in spec["names"]["categories"]
        assert spec["scope"] == "Namespaced"


def test_short_names_are_the_documented_ones() -> None:
    assert CRDS["WorkerPool"]["spec"]["names"]["shortNames"] == ["wp"]
    assert CRDS["JobSchedule"]["spec"]["names"]["shortNames"] == ["js"]
    assert CRDS["ExclusiveJob"]["spec"]["names"]["shortNames"] == ["xj"]


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind: str) -> None:
    assert structural_errors(schema_of(CRDS[kind])) == []


@pytest.mark.parametrize("kind", KINDS)
def test_status_is_a_subresource_with_standard_conditions(kind: str) -> None:
    version = crdschema.version_of(CRDS[kind])
    assert "status" in version["subresources"]
    conditions = schema_of(CRDS[kind])["properties"]["status"]["properties"]["conditions"]
    item = conditions["items"]
    assert set(item["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    # metav1.Condition: everything but observedGeneration is required.
    assert item["required"] == ["type", "status", "reason", "message", "lastTransitionTime"]
    assert item["properties"]["reason"]["pattern"] == METAV1_REASON
    assert item["properties"]["reason"]["minLength"] == 1
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


METAV1_REASON = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


def _with_condition(kind: str, **condition: Any) -> dict[str, Any]:
    obj = minimal(kind)
    entry = {"type": "Ready", "status": "True", "reason": "Synced", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
    entry.update(condition)
    obj["status"] = {"conditions": [{k: v for k, v in entry.items() if v is not None}]}
    return obj


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("change", "expected"), [
    ({"reason": None}, "'reason' is a required"),
    ({"message": None}, "'message' is a required"),
    ({"lastTransitionTime": None}, "'lastTransitionTime' is a required"),
    ({"reason": ""}, "should be non-empty"),
    ({"reason": "Spec conflict"}, "does not match"),
    ({"status": "true"}, "is not one of"),
    ({"lastTransitionTime": "yesterday"}, "is not a 'date-time'"),
], ids=["no-reason", "no-message", "no-time", "empty-reason", "reason-with-space",
        "status-case", "time-format"])
def test_a_condition_that_is_no_metav1_condition_is_refused(
        kind: str, change: dict[str, Any], expected: str) -> None:
    _, errors = admit(CRDS[kind], _with_condition(kind))
    assert errors == []
    _, errors = admit(CRDS[kind], _with_condition(kind, **change))
    assert any(expected in e for e in errors), errors


def test_every_condition_reason_the_controller_writes_is_a_metav1_reason() -> None:
    """Reasons are literals in the controller; a space or a dash would make the API
    server refuse the whole status patch, so every literal is checked here."""
    source = " ".join(p.read_text() for p in (ROOT / "operator" / "jobwarden" / "controller")
                      .rglob("*.py"))
    reasons = set(re.findall(r'reason=f?"([^"]*)"', source))
    reasons |= set(re.findall(r'"reason": "([^"]*)"', source))
    assert len(reasons) > 20
    assert sorted(r for r in reasons if not re.fullmatch(METAV1_REASON, r)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_default_is_accepted_by_its_own_field(kind: str) -> None:
    for path, node in crdschema.iter_nodes(schema_of(CRDS[kind])):
        if "default" in node:
            defaulted = crdschema.apply_defaults(node, copy.deepcopy(node["default"]))
            assert crdschema.openapi_errors(node, defaulted, resource=False) == [], path


@pytest.mark.parametrize("kind", KINDS)
def test_every_cel_rule_compiles(kind: str) -> None:
    import celpy

    env = celpy.Environment()
    rules = [
        rule["rule"]
        for _, node in crdschema.iter_nodes(schema_of(CRDS[kind]))
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert rules, f"{kind} has no CEL rule"
    for rule in rules:
        env.compile(rule)


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_point_at_fields_of_the_schema(kind: str) -> None:
    version = crdschema.version_of(CRDS[kind])
    schema = schema_of(CRDS[kind])
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = resolve_json_path(schema, column["jsonPath"])
        assert node is not None, f"{kind} column {column['name']}: {column['jsonPath']}"
        expected = {"date": "string", "integer": "integer", "boolean": "boolean"}.get(
            column["type"]
        )
        if expected:
            assert node.get("type") == expected, column


#: Fields that hold a time in the past: the only ones a ``date`` column may show
#: (kubectl renders it as an age, and a future time as ``<invalid>``).
PAST_TIMES = {".metadata.creationTimestamp", ".status.lastSlot", ".status.startedAt",
              ".status.finishedAt", ".status.lastSuccessfulTime", ".status.lastScheduleTime"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_date_column_only_shows_a_past_time(kind: str) -> None:
    for column in crdschema.version_of(CRDS[kind])["additionalPrinterColumns"]:
        if column["type"] == "date":
            assert column["jsonPath"] in PAST_TIMES, column
    next_run = [c for c in crdschema.version_of(CRDS["JobSchedule"])["additionalPrinterColumns"]
                if c["name"] == "Next Run"]
    assert next_run and next_run[0]["type"] == "string"


@pytest.mark.parametrize("kind", KINDS)
def test_column_types_are_ones_the_api_server_accepts(kind: str) -> None:
    # apiextensions validation: integer, number, string, boolean, date -- and a
    # format only from its list. The emulator accepts anything.
    for column in crdschema.version_of(CRDS[kind])["additionalPrinterColumns"]:
        assert column["type"] in ("integer", "number", "string", "boolean", "date"), column
        assert column.get("format", "") in ("", "int32", "int64", "float", "double", "byte",
                                             "date", "date-time", "password"), column
        assert column["jsonPath"].startswith("."), column


def test_job_schedule_shows_schedule_suspended_last_and_next_run_and_ready() -> None:
    names = [
        c["name"] for c in crdschema.version_of(CRDS["JobSchedule"])["additionalPrinterColumns"]
    ]
    for wanted in ("Schedule", "Suspended", "Last Run", "Next Run", "Ready"):
        assert wanted in names


def test_worker_pool_scale_subresource_matches_the_schema() -> None:
    scale = crdschema.version_of(CRDS["WorkerPool"])["subresources"]["scale"]
    schema = schema_of(CRDS["WorkerPool"])
    for key in ("specReplicasPath", "statusReplicasPath", "labelSelectorPath"):
        assert resolve_json_path(schema, scale[key]) is not None, key


# --- documented examples ----------------------------------------------------------------


def test_the_docs_show_a_full_example_of_each_kind() -> None:
    kinds = {doc["kind"] for doc in documented_examples()}
    assert kinds == set(KINDS)


@pytest.mark.parametrize(
    "example", documented_examples(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_documented_example_is_accepted(example: dict[str, Any]) -> None:
    _, errors = admit(CRDS[example["kind"]], example)
    assert errors == []


def test_defaults_fill_in_a_minimal_job_schedule() -> None:
    stored, errors = admit(CRDS["JobSchedule"], minimal("JobSchedule"))
    assert errors == []
    assert stored["spec"] | {} == {
        "interval": "5m",
        "job": {"class": "app.jobs:Ping"},
        "timeZone": "UTC",
        "catchUp": "latest",
        "catchUpWindowSeconds": 3600,
        "catchUpMax": 10,
        "concurrencyPolicy": "Allow",
        "suspend": False,
    }


def test_defaults_fill_in_a_minimal_worker_pool() -> None:
    stored, errors = admit(CRDS["WorkerPool"], minimal("WorkerPool"))
    assert errors == []
    spec = stored["spec"]
    assert spec["replicas"] == 1
    assert spec["queues"] == ["default"]
    assert spec["concurrency"] == 10
    assert spec["hostCap"] == 0
    assert spec["isolation"] == "thread"
    assert spec["dsnSecretRef"] == {"name": "db", "key": "dsn"}
    assert spec["drainTimeoutSeconds"] == 600
    assert spec["rollout"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["httpPort"] == 8080


def test_defaults_fill_in_a_minimal_exclusive_job() -> None:
    stored, errors = admit(CRDS["ExclusiveJob"], minimal("ExclusiveJob"))
    assert errors == []
    assert stored["spec"]["lease"] == {"onBusy": "defer"}


# --- bad specs --------------------------------------------------------------------------

BAD: list[tuple[str, str, dict[str, Any], str]] = [
    # (id, kind, spec changes, a piece of the expected error)
    ("schedule-and-interval", "JobSchedule", {"schedule": "* * * * *"}, "exactly one of"),
    ("neither-schedule-nor-interval", "JobSchedule", {"interval": None}, "exactly one of"),
    ("interval-unit", "JobSchedule", {"interval": "5x"}, "does not match"),
    ("interval-zero", "JobSchedule", {"interval": "0s"}, "does not match"),
    ("empty-schedule", "JobSchedule", {"interval": None, "schedule": ""}, "non-empty"),
    ("cron-6-fields", "JobSchedule", {"interval": None, "schedule": "0 0 2 * * *"},
     "five cron fields"),
    ("cron-4-fields", "JobSchedule", {"interval": None, "schedule": "0 2 * *"},
     "five cron fields"),
    ("cron-every", "JobSchedule", {"interval": None, "schedule": "@every 5m"},
     "five cron fields"),
    ("cron-reboot", "JobSchedule", {"interval": None, "schedule": "@reboot"},
     "five cron fields"),
    ("cron-junk", "JobSchedule", {"interval": None, "schedule": "every day at 2"},
     "five cron fields"),
    ("concurrency-policy", "JobSchedule", {"concurrencyPolicy": "Sometimes"}, "is not one of"),
    ("catch-up", "JobSchedule", {"catchUp": "some"}, "is not one of"),
    ("catch-up-window", "JobSchedule", {"catchUpWindowSeconds": 30}, "less than the minimum"),
    ("job-without-class", "JobSchedule", {"job": {"queue": "q"}}, "'class' is a required"),
    ("class-without-colon", "JobSchedule", {"job": {"class": "app.jobs.Ping"}}, "does not match"),
    ("typo-in-field", "JobSchedule", {"suspended": True}, "Additional properties"),
    ("typo-in-job", "JobSchedule", {"job": {"class": "a:B", "retries": 3}}, "Additional prop"),
    ("negative-timeout", "JobSchedule", {"job": {"class": "a:B", "timeoutSeconds": 0}}, "minimum"),
    ("data-not-object", "ExclusiveJob", {"job": {"class": "a:B", "data": [1]}}, "not of type"),
    ("on-busy", "ExclusiveJob", {"lease": {"onBusy": "wait"}}, "is not one of"),
    ("empty-key", "ExclusiveJob", {"concurrencyKey": ""}, "non-empty"),
    ("negative-replicas", "WorkerPool", {"replicas": -1}, "less than the minimum"),
    ("no-image-no-template", "WorkerPool", {"image": None}, "spec.image"),
    ("rollout-stuck", "WorkerPool", {"rollout": {"maxSurge": 0}}, "cannot both be 0"),
    ("isolation", "WorkerPool", {"isolation": "fork"}, "is not one of"),
    ("no-dsn", "WorkerPool", {"dsnSecretRef": None}, "'dsnSecretRef' is a required"),
    ("privileged-port", "WorkerPool", {"httpPort": 80}, "less than the minimum"),
    ("no-queues", "WorkerPool", {"queues": []}, "should be non-empty"),
    ("zero-concurrency", "WorkerPool", {"concurrency": 0}, "less than the minimum"),
    ("typo-in-resources", "WorkerPool", {"resources": {"limts": {"memory": "1Gi"}}},
     "Additional properties"),
    ("resources-not-quantities", "WorkerPool", {"resources": {"limits": {"cpu": [1]}}},
     "is not valid under any of the given schemas"),
    ("typo-in-env", "WorkerPool", {"env": [{"name": "A", "valu": "1"}]},
     "Additional properties"),
    ("env-without-name", "WorkerPool", {"env": [{"value": "1"}]}, "'name' is a required"),
    ("typo-in-env-source", "WorkerPool",
     {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "kee": "k"}}}]},
     "Additional properties"),
    ("env-value-not-string", "WorkerPool", {"env": [{"name": "A", "value": 1}]},
     "not of type"),
]


@pytest.mark.parametrize(
    ("kind", "changes", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_spec_is_refused_with_a_clear_message(
    kind: str, changes: dict[str, Any], expected: str
) -> None:
    _, errors = admit(CRDS[kind], with_spec(kind, **changes))
    assert errors, "accepted"
    assert any(expected in error for error in errors), errors


def test_job_schedule_without_spec_is_refused() -> None:
    obj = minimal("JobSchedule")
    del obj["spec"]
    _, errors = admit(CRDS["JobSchedule"], obj)
    assert any("'spec' is a required" in e for e in errors)


# --- immutable identity of an ExclusiveJob ----------------------------------------------


def test_exclusive_job_data_may_change_on_update() -> None:
    old = with_spec("ExclusiveJob", concurrencyKey="k")
    new = copy.deepcopy(old)
    new["spec"]["job"]["data"] = {"x": 1}
    assert admit(CRDS["ExclusiveJob"], new, old=old)[1] == []


def test_exclusive_job_class_cannot_change() -> None:
    old = minimal("ExclusiveJob")
    new = copy.deepcopy(old)
    new["spec"]["job"]["class"] = "app.jobs:Other"
    _, errors = admit(CRDS["ExclusiveJob"], new, old=old)
    assert any("spec.job.class is immutable" in e for e in errors), errors
    # The same object on create is fine: transition rules only judge updates.
    assert admit(CRDS["ExclusiveJob"], new)[1] == []


@pytest.mark.parametrize(
    ("old_key", "new_key"), [("a", "b"), (None, "b"), ("a", None)], ids=["change", "add", "remove"]
)
def test_exclusive_job_concurrency_key_cannot_change(
    old_key: str | None, new_key: str | None
) -> None:
    old = with_spec("ExclusiveJob", concurrencyKey=old_key)
    new = with_spec("ExclusiveJob", concurrencyKey=new_key)
    _, errors = admit(CRDS["ExclusiveJob"], new, old=old)
    assert any("spec.concurrencyKey is immutable" in e for e in errors), errors


def test_job_schedule_may_switch_from_interval_to_cron_on_update() -> None:
    old = minimal("JobSchedule")
    new = with_spec("JobSchedule", interval=None, schedule="@hourly")
    assert admit(CRDS["JobSchedule"], new, old=old)[1] == []


CRON_CORPUS = [
    "* * * * *", "30 2 * * 1-5", "*/15 9-17 * * MON-FRI", "0 0 1 JAN,JUL *", "@daily",
    "@HOURLY", "  0 3 * * *  ", "0\t3 * * 0", "5,35 */2 1-15/3 * 7", "0 0 L * *",
    "0 0 * * MON#2", "0 0 2 * * *", "0 2 * *", "@every 1h", "@reboot", "61 * * * *",
    "0 0 31 2 *", "",
]


@pytest.mark.parametrize("cron", CRON_CORPUS, ids=range(len(CRON_CORPUS)))
def test_the_schedule_rule_never_refuses_what_the_operator_accepts(cron: str) -> None:
    """The CEL rule is a coarse filter: whatever the operator's parser accepts, it
    admits; what it refuses is a subset of what the parser refuses."""
    from jobwarden.controller.specs import SpecError, parse_job_schedule

    spec = {"schedule": cron, "job": {"class": "app.jobs:Ping"}}
    try:
        parse_job_schedule(spec)
        operator_accepts = True
    except SpecError:
        operator_accepts = False
    _, errors = admit(CRDS["JobSchedule"], with_spec("JobSchedule", interval=None,
                                                     schedule=cron))
    if operator_accepts:
        assert errors == []
    refused_by_rule = any("five cron fields" in e for e in errors)
    if refused_by_rule:
        assert not operator_accepts


def test_a_pool_s_env_and_resources_take_what_a_container_s_take() -> None:
    stored, errors = admit(CRDS["WorkerPool"], with_spec(
        "WorkerPool",
        resources={"requests": {"cpu": "250m", "memory": "512Mi"},
                   "limits": {"cpu": 2, "memory": "1Gi", "ephemeral-storage": "2Gi"}},
        env=[{"name": "A", "value": "1"},
             {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
             {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k",
                                                              "optional": True}}},
             {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
             {"name": "E", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                               "divisor": "1Mi"}}}]))
    assert errors == []
    assert stored["spec"]["resources"]["limits"]["memory"] == "1Gi"


# --- spec.template: Kubernetes' PodTemplateSpec -----------------------------------------


def _pool_with_template(template: dict[str, Any]) -> dict[str, Any]:
    return with_spec("WorkerPool", template=template)


@pytest.mark.parametrize(("template", "expected"), [
    ({"spec": {"tolerration": []}}, "Additional properties"),
    ({"spec": {"containers": [{"name": "worker", "imagee": "x"}]}}, "Additional properties"),
    ({"spec": {"containers": [{"image": "x"}]}}, "'name' is a required"),
    ({"spec": {"containers": [{"name": "w", "ports": [{"name": "p"}]}]}},
     "'containerPort' is a required"),
    ({"spec": {"tolerations": [{"key": "k", "tolerationSeconds": "soon"}]}}, "not of type"),
    ({"metadata": {"labels": {"a": 1}}}, "not of type"),
], ids=["typo-in-pod-spec", "typo-in-container", "container-without-name", "port-without-number",
        "wrong-type", "label-not-string"])
def test_a_bad_pod_template_is_refused(template: dict[str, Any], expected: str) -> None:
    _, errors = admit(CRDS["WorkerPool"], _pool_with_template(template))
    assert any(expected in e for e in errors), errors


def test_a_realistic_pod_template_is_accepted() -> None:
    template = {
        "metadata": {"labels": {"team": "billing"}, "annotations": {"a": "b"}},
        "spec": {
            "serviceAccountName": "billing", "priorityClassName": "batch",
            "nodeSelector": {"pool": "batch"},
            "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"jobwarden.io/pool": "billing"}}}}]}},
            "initContainers": [{"name": "wait-db", "image": "busybox:1",
                                "command": ["sh", "-c", "true"]}],
            "containers": [
                {"name": "worker", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                 "limits": {"cpu": 2, "memory": "2Gi"}},
                 "ports": [{"name": "metrics", "containerPort": 9100}],
                 "startupProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                 "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
                {"name": "proxy", "image": "example/proxy:1",
                 "livenessProbe": {"tcpSocket": {"port": 5432}}},
            ],
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
        },
    }
    _, errors = admit(CRDS["WorkerPool"], _pool_with_template(template))
    assert errors == []
    # Only metadata: the operator adds the worker container.
    _, errors = admit(CRDS["WorkerPool"], _pool_with_template({"metadata": {}}))
    assert errors == []


def test_the_template_schema_is_what_the_generator_makes_from_the_kubernetes_spec() -> None:
    import json
    import shutil
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import crd_podtemplate

    go = shutil.which("go")
    cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                           check=False).stdout.strip() if go else ""
    spec = (ROOT.parent / "none") if not cache else \
        __import__("pathlib").Path(cache) / f"k8s.io/kubernetes@{crd_podtemplate.DEFAULT_VERSION}" \
        / crd_podtemplate.SPEC_PATH
    if not spec.exists():
        pytest.skip(f"k8s.io/kubernetes@{crd_podtemplate.DEFAULT_VERSION} not in the Go module "
                    "cache (python scripts/crd_podtemplate.py downloads it)")
    document = json.loads(spec.read_text())
    assert {t.key for t in crd_podtemplate.TARGETS} == {"template", "podTemplate", "env",
                                                        "resources"}
    for target in crd_podtemplate.TARGETS:
        schema = crd_podtemplate.target_schema(document, crd_podtemplate.DEFAULT_VERSION,
                                               target)
        text = target.path.read_text()
        assert crd_podtemplate.rewrite(text, schema, crd_podtemplate.DEFAULT_VERSION,
                                       key=target.key) == text


# --- spec.podTemplate: a run in a pod of its own ----------------------------------------

RUN_TEMPLATE = {"metadata": {"labels": {"team": "billing"}},
                "spec": {"containers": [{"name": "job", "image": "billing/jobs:7",
                                         "resources": {"limits": {"memory": "8Gi"}}}],
                         "serviceAccountName": "exporter",
                         "nodeSelector": {"pool": "batch"}}}


@pytest.mark.parametrize("kind", ["JobSchedule", "ExclusiveJob"])
def test_a_pod_run_with_a_secret_is_accepted(kind: str) -> None:
    stored, errors = admit(CRDS[kind], with_spec(kind, podTemplate=RUN_TEMPLATE,
                                                 dsnSecretRef={"name": "db"},
                                                 startDeadlineSeconds=120))
    assert errors == []
    assert stored["spec"]["dsnSecretRef"] == {"name": "db", "key": "dsn"}


@pytest.mark.parametrize("kind", ["JobSchedule", "ExclusiveJob"])
def test_a_pod_template_without_a_dsn_secret_is_refused(kind: str) -> None:
    _, errors = admit(CRDS[kind], with_spec(kind, podTemplate=RUN_TEMPLATE))
    assert any("spec.podTemplate needs spec.dsnSecretRef" in e for e in errors), errors


@pytest.mark.parametrize("kind", ["JobSchedule", "ExclusiveJob"])
def test_a_typo_in_a_run_pod_template_is_refused(kind: str) -> None:
    _, errors = admit(CRDS[kind], with_spec(kind, dsnSecretRef={"name": "db"}, podTemplate={
        "spec": {"containers": [{"name": "job", "image": "x", "resorces": {}}]}}))
    assert any("Additional properties" in e for e in errors), errors
    _, errors = admit(CRDS[kind], with_spec(kind, dsnSecretRef={"name": "db"},
                                            podTemplate=RUN_TEMPLATE, startDeadlineSeconds=1))
    assert errors


@pytest.mark.parametrize("kind", ["JobSchedule", "ExclusiveJob"])
def test_the_pod_columns_show_the_last_runs_pod(kind: str) -> None:
    columns = {c["name"]: c for c in crdschema.version_of(CRDS[kind])["additionalPrinterColumns"]}
    assert columns["Pod"]["jsonPath"] == ".status.lastPod"
    assert columns["Pod"].get("priority") == 1
