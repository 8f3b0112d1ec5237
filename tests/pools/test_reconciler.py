"""One reconciler pass against fake pods and a fake host registry: the order of effects."""

from __future__ import annotations

import datetime as dt
import types
from typing import Any

import kopf
import pytest

from jobwarden.controller.kube import events
from jobwarden.controller.specs import SpecError
from jobwarden.controller.workerpools import reconciler as pools
from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.structs.hosts import HostStatus

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SPEC: dict[str, Any] = {"image": "example/app:2", "replicas": 1,
                        "dsnSecretRef": {"name": "db"}, "drainTimeoutSeconds": 30}


class FakePods:
    def __init__(self, pods: list[dict[str, Any]], log: list[tuple[str, str]]) -> None:
        self.items, self.log = pods, log
        #: Secret name -> keys; None: the Secret does not exist; "forbidden": RBAC says no.
        self.secrets: dict[str, Any] = {"db": frozenset({"dsn"})}
        #: When set, create() raises it (an admission webhook, a quota).
        self.refuse: Exception | None = None
        self.budgets: dict[str, dict[str, Any]] = {}
        self.budget_reads = 0

    def pdb(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.budget_reads += 1
        return self.budgets.get(name)

    def put_pdb(self, namespace: str, manifest: dict[str, Any], *, exists: bool) -> None:
        name = manifest["metadata"]["name"]
        assert exists == (name in self.budgets)
        self.log.append(("patch-pdb" if exists else "create-pdb", name))
        spec = {k: v for k, v in manifest["spec"].items() if v is not None}
        self.budgets[name] = {**manifest, "spec": spec}

    def delete_pdb(self, namespace: str, name: str) -> None:
        self.log.append(("delete-pdb", name))
        self.budgets.pop(name, None)

    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        found = self.secrets.get(name)
        if found == "forbidden":
            raise PermissionError("secrets is forbidden")
        return found  # type: ignore[no-any-return]

    def list(self, namespace: str, *, selector: str,
             owner_uid: str | None = None) -> list[dict[str, Any]]:
        return self.items

    def create(self, namespace: str, manifest: dict[str, Any]) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.log.append(("create", manifest["metadata"]["name"]))

    def delete(self, namespace: str, name: str, *, grace: int | None = None) -> None:
        self.log.append(("delete", name))

    def annotate(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        assert pools_spec.DRAIN_STARTED_ANNOTATION in annotations
        self.log.append(("annotate", name))


def host(name: str, *, running: int = 0, draining: bool = False) -> HostStatus:
    return HostStatus(name=name, pool="p", code_version="1", cap=None, running=running,
                      draining=draining, drain_reason=None, drain_started_at=None,
                      drain_expires_at=None, drain_idle_at=None, started_at=T0,
                      last_seen_at=T0, seen_seconds_ago=0.0, processes=1,
                      stopping_processes=0, slots=4)


def ready_pod(name: str, template_hash: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {pools_spec.HASH_LABEL: template_hash},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    found: list[Any] = []
    monkeypatch.setattr(events, "post", lambda body, items: found.extend(items))
    return found


def reconciler(pods: list[dict[str, Any]], hosts: list[HostStatus],
               log: list[tuple[str, str]]) -> pools.PoolReconciler:
    registry = types.SimpleNamespace(
        status=lambda pool: hosts,
        running=lambda names: {h.name: h.running for h in hosts},
        drain=lambda host, expires_in, reason: log.append(("drain", host)) or [host])
    runtime: Any = types.SimpleNamespace(
        client=types.SimpleNamespace(hosts=registry),
        health=types.SimpleNamespace(database=lambda ok: None),
        reconciled=lambda kind, result: None, failed=lambda kind: None)
    return pools.PoolReconciler(runtime, FakePods(pods, log))  # type: ignore[arg-type]


def body(spec: dict[str, Any]) -> Any:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": spec, "status": {}}


def test_a_rollout_pass_annotates_the_old_pod_before_it_drains_the_host(posted: list[Any]):
    current = pools_spec.parse_pool("p", SPEC).template_hash
    log: list[tuple[str, str]] = []
    pods = [ready_pod("old", "oldhash"), ready_pod("new", current)]
    patch = kopf.Patch()
    reconciler(pods, [host("old", running=1), host("new")], log).reconcile(
        body=body(SPEC), patch=patch, trigger="test")
    assert log[:2] == [("annotate", "old"), ("drain", "old")]
    assert patch["status"]["drainingHosts"] == ["old"]
    assert patch["status"]["codeVersion"] == "2"
    assert {e.reason for e in posted} >= {"Draining", "RolloutStarted"}


def test_an_invalid_spec_changes_nothing_and_says_why(posted: list[Any]):
    log: list[tuple[str, str]] = []
    patch = kopf.Patch()
    result = reconciler([ready_pod("a", "x")], [], log).reconcile(
        body=body({**SPEC, "dsnSecretRef": None}), patch=patch, trigger="test")
    assert result == "invalid" and log == []
    (progressing,) = patch["status"]["conditions"]
    assert progressing["reason"] == "InvalidSpec" and "dsnSecretRef" in progressing["message"]
    assert [e.reason for e in posted] == ["InvalidSpec"]


class Refused(Exception):
    """What the Kubernetes client raises: the API server's Status in ``body``."""

    body = '{"kind": "Status", "message": "pods \\"p-x\\" is forbidden: exceeded quota: pods"}'


def _conditions(patch: kopf.Patch) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in patch["status"]["conditions"]}


@pytest.mark.parametrize(("secrets", "reason"), [
    ({}, "SecretNotFound"), ({"db": frozenset({"url"})}, "KeyNotFound")])
def test_a_missing_dsn_secret_is_a_condition_and_an_event_and_no_pod_is_created(
        posted: list[Any], secrets: dict[str, Any], reason: str) -> None:
    log: list[tuple[str, str]] = []
    pools_ = reconciler([], [], log)
    pools_.pods.secrets = secrets  # type: ignore[attr-defined]
    patch = kopf.Patch()
    pools_.reconcile(body=body(SPEC), patch=patch, trigger="test")
    assert log == []
    condition = _conditions(patch)["DSNSecretReady"]
    assert (condition["status"], condition["reason"]) == ("False", reason)
    assert "ns/db" in condition["message"]
    assert [(e.type, e.reason) for e in posted] == [("Warning", reason)]


def test_a_present_secret_is_true_and_an_unreadable_one_unknown(posted: list[Any]) -> None:
    log: list[tuple[str, str]] = []
    patch = kopf.Patch()
    reconciler([], [], log).reconcile(body=body(SPEC), patch=patch, trigger="test")
    assert _conditions(patch)["DSNSecretReady"]["status"] == "True"
    assert [name for op, name in log if op == "create"]
    forbidden = reconciler([], [], log := [])
    forbidden.pods.secrets = {"db": "forbidden"}  # type: ignore[attr-defined]
    patch = kopf.Patch()
    forbidden.reconcile(body=body(SPEC), patch=patch, trigger="test")
    assert _conditions(patch)["DSNSecretReady"]["reason"] == "Forbidden"
    assert [op for op, _ in log] == ["create"]  # not knowing is no reason to stop


def test_a_refused_pod_create_is_a_condition_and_an_event_until_a_create_succeeds(
        posted: list[Any]) -> None:
    log: list[tuple[str, str]] = []
    pools_ = reconciler([], [], log)
    pools_.pods.refuse = Refused()  # type: ignore[attr-defined]
    patch = kopf.Patch()
    pools_.reconcile(body=body({**SPEC, "replicas": 3}), patch=patch, trigger="test")
    failure = _conditions(patch)["ReplicaFailure"]
    assert (failure["status"], failure["reason"]) == ("True", "FailedCreate")
    assert "exceeded quota" in failure["message"]
    assert [(e.type, e.reason) for e in posted] == [("Warning", "FailedCreate")]  # once a pass
    pools_.pods.refuse = None  # type: ignore[attr-defined]
    again = kopf.Patch()
    previous = body({**SPEC, "replicas": 3})
    previous["status"] = {"conditions": patch["status"]["conditions"]}
    pools_.reconcile(body=previous, patch=again, trigger="test")
    failure = _conditions(again)["ReplicaFailure"]
    assert (failure["status"], failure["reason"]) == ("False", "PodsCreated")
    assert len([op for op, _ in log if op == "create"]) == 3


def test_a_pool_s_disruption_budget_is_created_updated_and_deleted_with_the_spec(
        posted: list[Any]) -> None:
    log: list[tuple[str, str]] = []
    pools_ = reconciler([], [], log)
    budgets = pools_.pods.budgets  # type: ignore[attr-defined]
    pools_.reconcile(body=body({**SPEC, "podDisruptionBudget": {"maxUnavailable": 1}}),
                     patch=kopf.Patch(), trigger="test")
    budget = budgets["p"]
    assert budget["spec"] == {"maxUnavailable": 1,
                              "selector": {"matchLabels": {"jobwarden.io/pool": "p"}}}
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "u"
    pools_.reconcile(body=body({**SPEC, "podDisruptionBudget": {"minAvailable": "50%"}}),
                     patch=kopf.Patch(), trigger="test")
    assert budgets["p"]["spec"]["minAvailable"] == "50%"
    assert "maxUnavailable" not in budgets["p"]["spec"]
    pools_.reconcile(body=body(SPEC), patch=kopf.Patch(), trigger="test")
    assert budgets == {}
    reads = pools_.pods.budget_reads  # type: ignore[attr-defined]
    pools_.reconcile(body=body(SPEC), patch=kopf.Patch(), trigger="test")
    assert pools_.pods.budget_reads == reads  # type: ignore[attr-defined]  # no GET per pass


def test_a_budget_of_the_same_name_owned_by_someone_else_is_left_alone(
        posted: list[Any]) -> None:
    log: list[tuple[str, str]] = []
    pools_ = reconciler([], [], log)
    theirs = {"metadata": {"name": "p", "ownerReferences": [{"uid": "other"}]},
              "spec": {"maxUnavailable": 3}}
    pools_.pods.budgets["p"] = theirs  # type: ignore[attr-defined]
    pools_.reconcile(body=body({**SPEC, "podDisruptionBudget": {"maxUnavailable": 1}}),
                     patch=kopf.Patch(), trigger="test")
    pools_.reconcile(body=body(SPEC), patch=kopf.Patch(), trigger="test")
    assert pools_.pods.budgets["p"] is theirs  # type: ignore[attr-defined]
    assert not [op for op, _ in log if op.endswith("-pdb")]


@pytest.mark.parametrize("budget", [{}, {"maxUnavailable": 1, "minAvailable": 1},
                                    {"maxUnavailable": "half"}, {"minAvailable": -1}])
def test_a_bad_disruption_budget_is_an_invalid_spec(budget: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as caught:
        pools_spec.parse_pool("p", {**SPEC, "podDisruptionBudget": budget})
    assert caught.value.field.startswith("podDisruptionBudget")


@pytest.mark.parametrize("secrets", [{}, {"db": frozenset({"url"})}])
def test_pods_held_back_for_a_missing_secret_are_not_counted_in_the_status(
        posted: list[Any], secrets: dict[str, Any]) -> None:
    log: list[tuple[str, str]] = []
    pools_ = reconciler([], [], log)
    pools_.pods.secrets = secrets  # type: ignore[attr-defined]
    patch = kopf.Patch()
    pools_.reconcile(body=body({**SPEC, "replicas": 3}), patch=patch, trigger="test")
    assert log == []
    status = patch["status"]
    # .status.replicas is the scale subresource's statusReplicasPath: an HPA reads it.
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"]) == (0, 0, 0)
    failure = _conditions(patch)["ReplicaFailure"]
    assert failure["status"] == "True"
    assert failure["reason"] == _conditions(patch)["DSNSecretReady"]["reason"]
    assert failure["message"].startswith("3 pod(s) not created: Secret ns/db")


def test_refused_creates_are_not_counted_in_the_status(posted: list[Any]) -> None:
    current = pools_spec.parse_pool("p", SPEC).template_hash
    log: list[tuple[str, str]] = []
    pools_ = reconciler([ready_pod("a", current)], [host("a")], log)
    pools_.pods.refuse = Refused()  # type: ignore[attr-defined]
    patch = kopf.Patch()
    pools_.reconcile(body=body({**SPEC, "replicas": 3}), patch=patch, trigger="test")
    assert (patch["status"]["replicas"], patch["status"]["updatedReplicas"]) == (1, 1)


def crashing_pod(name: str, template_hash: str) -> dict[str, Any]:
    pod = ready_pod(name, template_hash)
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                     "containerStatuses": [{
                         "name": "worker", "ready": False, "restartCount": 4,
                         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                         "lastState": {"terminated": {
                             "exitCode": 5, "reason": "Error",
                             "message": "jobwarden: error: cannot import app module 'x'"}}}]}
    return pod


def test_a_crash_looping_pool_is_a_replica_failure_with_one_warning_naming_the_error(
        posted: list[Any]) -> None:
    current = pools_spec.parse_pool("p", SPEC).template_hash
    pools_ = reconciler([crashing_pod("p-1", current)], [], [])
    patch = kopf.Patch()
    pools_.reconcile(body=body(SPEC), patch=patch, trigger="test")
    failure = _conditions(patch)["ReplicaFailure"]
    assert (failure["status"], failure["reason"]) == ("True", "CrashLoopBackOff")
    assert "cannot import app module 'x'" in failure["message"]
    assert _conditions(patch)["Progressing"]["status"] == "True"  # within its deadline
    warnings = [e for e in posted if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["CrashLoopBackOff"]
    assert "pod p-1 container worker" in warnings[0].message
    assert "cannot import app module 'x'" in warnings[0].message
    again = body(SPEC)
    again["status"] = dict(patch["status"])
    posted.clear()
    pools_.reconcile(body=again, patch=kopf.Patch(), trigger="test")
    assert [e for e in posted if e.type == "Warning"] == []  # no duplicate


def test_a_pool_without_progress_past_its_deadline_says_so_once(posted: list[Any]) -> None:
    current = pools_spec.parse_pool("p", SPEC).template_hash
    spec = {**SPEC, "progressDeadlineSeconds": 60}
    pools_ = reconciler([crashing_pod("p-1", current)], [], [])
    stale = body(spec)
    stale["status"] = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                       "readyReplicas": 0, "lastProgressTime": "2020-01-01T00:00:00Z",
                       "conditions": [{"type": "Progressing", "status": "True",
                                       "reason": "ScalingUp", "message": "0 of 1 pod(s) ready",
                                       "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    patch = kopf.Patch()
    pools_.reconcile(body=stale, patch=patch, trigger="test")
    progressing = _conditions(patch)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False",
                                                              "ProgressDeadlineExceeded")
    assert "no progress for more than 60s" in progressing["message"]
    assert "ProgressDeadlineExceeded" in [e.reason for e in posted if e.type == "Warning"]
    later = body(spec)
    later["status"] = {**stale["status"], **patch["status"]}
    posted.clear()
    pools_.reconcile(body=later, patch=kopf.Patch(), trigger="test")
    assert "ProgressDeadlineExceeded" not in [e.reason for e in posted]
