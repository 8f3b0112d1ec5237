"""What a WorkerPool's status says after a pass, and its Events: the pure decisions.

workerpools/status.py decides from values (the plan, the DSN Secret's
condition, the creates refused and made, the pods' states) what the reconciler
writes and posts; these tests are its specification, with no cluster and no
database (tests/pools/test_reconciler.py checks the pass that applies them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

import pytest

from jobwarden.controller.kube import status as st
from jobwarden.controller.workerpools import rollout
from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.controller.workerpools import status as pool_status
from jobwarden.structs.hosts import HostStatus

NOW_DT = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
NOW = NOW_DT.timestamp()
SPEC = pools_spec.parse_pool("workers", {"image": "example/app:2", "replicas": 2,
                                         "dsnSecretRef": {"name": "db"}})
SECRET_OK = pool_status.secret_condition("ns", "db", "dsn", keys=frozenset({"dsn"}))
SECRET_MISSING = pool_status.secret_condition("ns", "db", "dsn", keys=None)


def pod(name: str, template_hash: str = SPEC.template_hash, *, ready: bool = True
        ) -> rollout.PodView:
    return rollout.PodView(name=name, template_hash=template_hash, created=NOW - 60,
                           phase="Running", ready=ready)


def plan_for(pods: list[rollout.PodView]) -> rollout.Plan:
    hosts = {p.name: rollout.HostView(registered=True) for p in pods}
    return rollout.decide(pool_status.desired_of(SPEC), pods, hosts, now=NOW)


def facts(plan: rollout.Plan, *, previous: dict[str, Any] | None = None,
          secret: st.Condition = SECRET_OK, failures: tuple[str, ...] = (),
          created: int | None = None, pods: list[dict[str, Any]] | None = None
          ) -> pool_status.PassFacts:
    return pool_status.PassFacts(
        name="workers", generation=1, previous=previous or {}, spec=SPEC, plan=plan,
        secret=secret, failures=failures,
        created=plan.summary.planned if created is None else created,
        pods=pods or [], now=NOW, now_dt=NOW_DT)


def conditions(plan: pool_status.StatusPlan) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in plan.status["conditions"]}


def reasons(plan: pool_status.StatusPlan) -> list[str]:
    return [e.reason for e in plan.events]


def crash_looping(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Running", "containerStatuses": [{
        "name": "worker", "restartCount": 3, "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "cannot import app"}}}]}}


# -- the DSN Secret ---------------------------------------------------------------------------


def test_the_secret_condition_says_which_part_is_missing_or_unreadable() -> None:
    assert (SECRET_OK.status, SECRET_OK.reason) == ("True", "SecretFound")
    assert (SECRET_MISSING.status, SECRET_MISSING.reason) == ("False", "SecretNotFound")
    no_key = pool_status.secret_condition("ns", "db", "url", keys=frozenset({"dsn"}))
    assert (no_key.status, no_key.reason) == ("False", "KeyNotFound")
    assert "'url'" in no_key.message
    forbidden = pool_status.secret_condition("ns", "db", "dsn", keys=None,
                                             forbidden="secrets is forbidden")
    assert (forbidden.status, forbidden.reason) == ("Unknown", "Forbidden")
    assert "secrets is forbidden" in forbidden.message


def test_a_secret_that_turns_missing_is_one_warning_not_one_per_pass() -> None:
    plan = plan_for([pod("a"), pod("b")])
    first = pool_status.decide_status(facts(plan, secret=SECRET_MISSING))
    assert reasons(first) == ["SecretNotFound"]
    assert conditions(first)["DSNSecretReady"]["status"] == "False"
    again = pool_status.decide_status(facts(plan, previous=first.status, secret=SECRET_MISSING))
    assert "SecretNotFound" not in reasons(again)


# -- ReplicaFailure ---------------------------------------------------------------------------


def test_a_refused_create_comes_before_a_missing_secret_and_a_crash_loop() -> None:
    plan = plan_for([])
    assert any(isinstance(a, rollout.Create) for a in plan.actions)
    condition, events = pool_status.failure_condition(facts(
        plan, secret=SECRET_MISSING, failures=("creating pod x failed: quota",), created=0,
        pods=[crash_looping("old")]))
    assert (condition.status, condition.reason) == ("True", "FailedCreate")
    assert condition.message == "creating pod x failed: quota" and events == []


def test_creates_held_back_for_a_missing_secret_are_a_replica_failure() -> None:
    plan = plan_for([])
    condition, _ = pool_status.failure_condition(facts(plan, secret=SECRET_MISSING, created=0))
    assert (condition.status, condition.reason) == ("True", "SecretNotFound")
    assert condition.message.startswith("2 pod(s) not created: ")


def test_a_crash_loop_is_a_replica_failure_with_a_warning_only_when_it_changes() -> None:
    plan = plan_for([pod("a"), pod("b")])
    condition, events = pool_status.failure_condition(facts(plan, pods=[crash_looping("a")]))
    assert (condition.status, condition.reason) == ("True", "CrashLoopBackOff")
    assert "cannot import app" in condition.message
    assert [e.type for e in events] == ["Warning"]
    before = {"conditions": st.set_conditions(None, [condition], generation=1, now=NOW_DT)}
    _, again = pool_status.failure_condition(facts(plan, previous=before,
                                                   pods=[crash_looping("a")]))
    assert again == []


def test_no_failure_says_whether_pods_were_just_created() -> None:
    made, _ = pool_status.failure_condition(facts(plan_for([])))
    assert (made.status, made.reason) == ("False", "PodsCreated")
    idle, _ = pool_status.failure_condition(facts(plan_for([pod("a"), pod("b")])))
    assert (idle.status, idle.reason) == ("False", "NoFailure")


# -- the rollout ------------------------------------------------------------------------------


def test_a_new_template_starts_a_rollout_once_and_its_end_is_timed() -> None:
    old = [pod("a", "old"), pod("b", "old")]
    started = pool_status.decide_status(facts(plan_for(old)))
    assert "RolloutStarted" in reasons(started)
    assert conditions(started)["Progressing"]["reason"] == "RollingUpdate"
    again = pool_status.decide_status(facts(plan_for(old), previous=started.status))
    assert "RolloutStarted" not in reasons(again)

    since = NOW_DT - dt.timedelta(seconds=90)
    previous = {**started.status, "conditions": st.set_conditions(
        None, [st.Condition(type="Progressing", status="True", reason="RollingUpdate",
                            message="rolling")], generation=1, now=since)}
    done = pool_status.decide_status(facts(plan_for([pod("c"), pod("d")]), previous=previous))
    assert "RolloutComplete" in reasons(done)
    assert done.rollout_seconds == 90.0


def test_the_status_counts_only_the_pods_that_were_created() -> None:
    plan = plan_for([])
    assert plan.summary.planned == 2
    decided = pool_status.decide_status(facts(plan, created=1))
    assert decided.status["replicas"] == 1 and decided.status["updatedReplicas"] == 1
    assert decided.status["codeVersion"] == SPEC.code_version
    assert decided.status["selector"] == SPEC.selector


def test_a_pool_stuck_past_its_deadline_warns_once() -> None:
    plan = plan_for([pod("a", ready=False), pod("b", ready=False)])
    stalled = {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
               "readyReplicas": 0, "lastProgressTime": st.timestamp(
                   NOW_DT - dt.timedelta(seconds=SPEC.progress_deadline + 1)),
               "conditions": st.set_conditions(None, [st.Condition(
                   type="Progressing", status="True", reason="ScalingUp", message="")],
                   generation=1, now=NOW_DT)}
    first = pool_status.decide_status(facts(plan, previous=stalled))
    assert conditions(first)["Progressing"]["reason"] == "ProgressDeadlineExceeded"
    assert reasons(first).count("ProgressDeadlineExceeded") == 1
    again = pool_status.decide_status(facts(plan, previous=first.status))
    assert "ProgressDeadlineExceeded" not in reasons(again)


# -- before any pod: an invalid spec, the hosts ---------------------------------------------


def test_an_invalid_spec_is_progressing_false_and_one_warning() -> None:
    first = pool_status.invalid_spec({"replicas": 3}, "spec.replicas: bad", generation=2,
                                     now=NOW_DT)
    assert first.status["replicas"] == 3  # the rest of the status is kept
    progressing = conditions(first)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "InvalidSpec")
    assert reasons(first) == ["InvalidSpec"]
    again = pool_status.invalid_spec(first.status, "spec.replicas: bad", generation=2,
                                     now=NOW_DT)
    assert again.events == []


def test_a_host_counts_as_registered_only_with_live_processes() -> None:
    def host(name: str, *, processes: int, draining: bool = False) -> HostStatus:
        return HostStatus(name=name, pool="workers", code_version="1", cap=None, running=0,
                          draining=draining, drain_reason=None, drain_started_at=None,
                          drain_expires_at=None, drain_idle_at=None, started_at=NOW_DT,
                          last_seen_at=NOW_DT, seen_seconds_ago=0.0, processes=processes,
                          stopping_processes=0, slots=4)

    views = pool_status.host_views(
        ["a", "b", "c"], {"a": host("a", processes=1), "b": host("b", processes=0,
                                                                 draining=True)}, {"a": 2})
    assert views["a"] == rollout.HostView(running=2, registered=True, draining=False)
    assert views["b"] == rollout.HostView(running=0, registered=False, draining=True)
    assert views["c"] == rollout.HostView()


def test_a_drain_s_time_left_is_read_on_the_database_clock() -> None:
    """The row was last seen 20 s before the database's now, its drain expires 50 s after
    that sighting: 30 s left, whatever this process's clock says."""
    seen = NOW_DT - dt.timedelta(hours=3)  # a skewed local clock changes nothing
    host = HostStatus(name="a", pool="workers", code_version="1", cap=None, running=0,
                      draining=True, drain_reason="rollout", drain_started_at=seen,
                      drain_expires_at=seen + dt.timedelta(seconds=50), drain_idle_at=None,
                      started_at=seen, last_seen_at=seen, seen_seconds_ago=20.0, processes=1,
                      stopping_processes=0, slots=4)
    views = pool_status.host_views(["a"], {"a": host}, {})
    assert views["a"].drain_left == pytest.approx(30.0)
    forever = dataclasses.replace(host, drain_expires_at=None)
    assert pool_status.host_views(["a"], {"a": forever}, {})["a"].drain_left == math.inf


def test_the_desired_state_is_the_spec_s_replicas_version_and_rollout_bounds() -> None:
    wide = dataclasses.replace(SPEC, max_surge=3, max_unavailable=1)
    desired = pool_status.desired_of(wide)
    assert (desired.replicas, desired.template_hash, desired.max_surge,
            desired.max_unavailable, desired.drain_timeout) == \
        (2, SPEC.template_hash, 3, 1, SPEC.drain_timeout)
