"""The WorkerPool decision: scaling, drain-first rollouts, replacement (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jobwarden.controller.workerpools import rollout
from jobwarden.controller.workerpools.rollout import Create, Delete, Drain, HostView, PodView

NEW, OLD = "new0000000", "old0000000"
NOW = 10_000.0


def desired(replicas: int = 3, *, surge: int = 1, unavailable: int = 0,
            drain: float = 60) -> rollout.Desired:
    return rollout.Desired(replicas=replicas, template_hash=NEW, max_surge=surge,
                           max_unavailable=unavailable, drain_timeout=drain)


def pod(name: str, version: str = NEW, *, ready: bool = True, created: float = 0.0,
        phase: str = "Running", drain_started: float | None = None,
        terminating: bool = False) -> PodView:
    return PodView(name=name, template_hash=version, created=created, phase=phase,
                   ready=ready, terminating=terminating, drain_started=drain_started)


def decide(want: rollout.Desired, pods: Sequence[PodView],
           hosts: dict[str, HostView] | None = None) -> rollout.Plan:
    return rollout.decide(want, pods, hosts or {}, now=NOW)


def drained(plan: rollout.Plan) -> set[str]:
    return {a.pod for a in plan.actions if isinstance(a, Drain)}


def deleted(plan: rollout.Plan) -> dict[str, str]:
    return {a.pod: a.reason for a in plan.actions if isinstance(a, Delete)}


def created(plan: rollout.Plan) -> int:
    return sum(a.count for a in plan.actions if isinstance(a, Create))


def test_an_empty_pool_creates_its_replicas():
    plan = decide(desired(3), [])
    assert created(plan) == 3 and not drained(plan)
    assert plan.summary.progress_reason == "ScalingUp"


def test_a_settled_pool_does_nothing_and_reports_complete():
    plan = decide(desired(2), [pod("a"), pod("b")])
    assert plan.actions == ()
    assert plan.summary.progress_reason == "Complete" and plan.summary.available
    assert (plan.summary.replicas, plan.summary.updated, plan.summary.ready) == (2, 2, 2)


def test_rollout_with_max_unavailable_0_starts_a_new_pod_before_draining_any():
    old = [pod("a", OLD), pod("b", OLD), pod("c", OLD)]
    plan = decide(desired(3), old)
    assert created(plan) == 1 and not drained(plan)
    assert plan.summary.progress_reason == "RollingUpdate"


def test_an_old_host_is_drained_only_once_its_replacement_is_ready():
    old = [pod("a", OLD), pod("b", OLD), pod("c", OLD)]
    assert not drained(decide(desired(3), [*old, pod("n1", ready=False)]))
    plan = decide(desired(3), [*old, pod("n1")])
    assert len(drained(plan)) == 1
    assert created(plan) == 1  # the drained host no longer counts against the surge


def test_the_least_busy_old_host_is_drained_first():
    old = [pod("a", OLD), pod("b", OLD), pod("c", OLD)]
    hosts = {"a": HostView(running=5, registered=True), "b": HostView(running=0, registered=True),
             "c": HostView(running=2, registered=True)}
    assert drained(decide(desired(3), [*old, pod("n1")], hosts)) == {"b"}


def test_max_unavailable_drains_before_replacements_exist():
    old = [pod("a", OLD), pod("b", OLD), pod("c", OLD)]
    plan = decide(desired(3, surge=0, unavailable=1), old)
    assert len(drained(plan)) == 1 and created(plan) == 1


def test_old_pods_that_are_not_ready_are_drained_at_once():
    plan = decide(desired(2), [pod("a", OLD, ready=False), pod("b", OLD)])
    assert drained(plan) == {"a"}


def test_a_draining_host_is_deleted_once_idle_and_not_before():
    draining = pod("a", OLD, drain_started=NOW - 5)
    busy = {"a": HostView(running=1, registered=True, draining=True)}
    assert deleted(decide(desired(1), [draining, pod("n")], busy)) == {}
    idle = {"a": HostView(running=0, registered=True, draining=True)}
    assert deleted(decide(desired(1), [draining, pod("n")], idle)) == {"a": "idle"}


def test_an_idle_host_whose_drain_did_not_take_is_drained_again_not_deleted():
    draining = pod("a", OLD, drain_started=NOW - 5)
    hosts = {"a": HostView(running=0, registered=True, draining=False)}
    plan = decide(desired(1), [draining, pod("n")], hosts)
    assert deleted(plan) == {}
    assert [a for a in plan.actions if isinstance(a, Drain)] == [Drain("a", "rollout", again=True)]


@pytest.mark.parametrize("started", [NOW - 5, NOW - 31], ids=["idle", "past-timeout"])
def test_a_drain_about_to_lapse_is_issued_again_before_the_pod_is_deleted(started: float):
    """A restarted operator on a loaded machine came back to an idle draining host a
    second before its drain expired, deleted the pod, and the host, its drain lapsed,
    had claimed a job meanwhile (a fresh-clone run of 2026-12-02). The drain is extended
    first."""
    draining = pod("a", OLD, drain_started=started)
    lapsing = {"a": HostView(running=0, registered=True, draining=True, drain_left=1.0)}
    plan = decide(desired(1, drain=30), [draining, pod("n")], lapsing)
    assert deleted(plan) == {}
    assert [a for a in plan.actions if isinstance(a, Drain)] == [Drain("a", "rollout", again=True)]
    held = {"a": HostView(running=0, registered=True, draining=True,
                          drain_left=rollout.DRAIN_LEFT_TO_DELETE)}
    assert deleted(decide(desired(1, drain=30), [draining, pod("n")], held)) == {"a": "idle"}


def test_a_host_gone_from_the_registry_with_nothing_running_is_idle():
    plan = decide(desired(1), [pod("a", OLD, drain_started=NOW - 1), pod("n")])
    assert deleted(plan) == {"a": "idle"}


def test_at_the_drain_timeout_the_pod_is_deleted_and_its_jobs_counted():
    hosts = {"a": HostView(running=2, registered=True, draining=True)}
    plan = decide(desired(1, drain=30), [pod("a", OLD, drain_started=NOW - 31), pod("n")], hosts)
    assert [a for a in plan.actions if isinstance(a, Delete)] == [Delete("a", "drain-timeout", 2)]


def test_scale_down_drains_old_versions_first_then_the_least_busy():
    pods = [pod("a"), pod("b"), pod("c", OLD), pod("d")]
    hosts = {"a": HostView(running=3, registered=True), "b": HostView(running=0, registered=True),
             "d": HostView(running=1, registered=True)}
    plan = decide(desired(2), pods, hosts)
    assert drained(plan) == {"c", "b"}
    assert created(plan) == 0


def test_scale_to_zero_drains_everything():
    plan = decide(desired(0), [pod("a"), pod("b", OLD)])
    assert drained(plan) == {"a", "b"} and created(plan) == 0


def test_a_dead_pod_is_deleted_and_replaced_in_the_same_pass():
    hosts = {"a": HostView(running=2, registered=True)}
    plan = decide(desired(2), [pod("a", phase="Failed", ready=False), pod("b")], hosts)
    assert deleted(plan) == {"a": "failed"} and created(plan) == 1


def test_terminating_pods_are_only_counted():
    plan = decide(desired(1), [pod("a", terminating=True), pod("b")])
    assert plan.actions == ()
    assert plan.summary.replicas == 2


def test_draining_hosts_are_reported_and_keep_progressing_true():
    hosts = {"a": HostView(running=1, registered=True, draining=True)}
    plan = decide(desired(1), [pod("a", OLD, drain_started=NOW - 1), pod("n")], hosts)
    assert plan.summary.draining == ("a",)
    assert plan.summary.progress_reason == "RollingUpdate"
    conditions = {c["type"]: c for c in rollout.conditions_of(plan.summary, replicas=1)}
    assert conditions["Draining"]["status"] == "True" and "a" in conditions["Draining"]["message"]
    assert conditions["Available"]["status"] == "True"


def test_a_rollout_walks_to_completion_without_ever_dropping_below_replicas_ready():
    """Simulate passes: new pods become ready one pass after creation, drains take 2 passes."""
    pods = {f"o{i}": pod(f"o{i}", OLD) for i in range(3)}
    hosts: dict[str, HostView] = {n: HostView(running=1, registered=True) for n in pods}
    now, counter, drain_age = NOW, 0, {}
    for _ in range(40):
        plan = rollout.decide(desired(3), list(pods.values()), hosts, now=now)
        ready = sum(1 for p in pods.values() if p.ready and p.drain_started is None)
        assert ready >= 3 or counter < 3
        for action in plan.actions:
            if isinstance(action, Create):
                for _ in range(action.count):
                    counter += 1
                    pods[f"n{counter}"] = pod(f"n{counter}", ready=False, created=now)
            elif isinstance(action, Drain):
                pods[action.pod] = pod(action.pod, OLD, drain_started=now)
                hosts[action.pod] = HostView(running=1, registered=True, draining=True)
                drain_age[action.pod] = 0
            elif isinstance(action, Delete):
                assert hosts[action.pod].running == 0
                del pods[action.pod]
        for name, age in list(drain_age.items()):
            drain_age[name] = age + 1
            if age + 1 >= 2 and name in hosts:
                hosts[name] = HostView(running=0, registered=True, draining=True)
        for name, p in list(pods.items()):
            if p.template_hash == NEW and not p.ready:
                pods[name] = pod(name, ready=True, created=p.created)
        now += 1
        if plan.summary.progress_reason == "Complete":
            break
    assert sorted(p.template_hash for p in pods.values()) == [NEW] * 3
    assert counter == 3


def test_rollout_started_and_finished_follow_the_progressing_reason():
    rolling = decide(desired(1), [pod("a", OLD)]).summary
    done = decide(desired(1), [pod("n")]).summary
    assert rollout.rollout_started({"reason": "Complete"}, rolling)
    assert not rollout.rollout_started({"reason": "RollingUpdate"}, rolling)
    assert rollout.rollout_finished({"reason": "RollingUpdate"}, done)
    assert not rollout.rollout_finished({"reason": "ScalingUp"}, done)
