"""controller/podruns/fates.py: which pod states end a run, and with which cause (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.controller.podruns import fates
from jobwarden.structs.podruns import POD_FAILURE_CAUSES

DEADLINE = 60.0


def pod(phase: str = "Pending", *, containers: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None, reason: str | None = None,
        message: str | None = None, deleting: bool = False,
        stop_reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if containers is not None:
        status["containerStatuses"] = containers
    if conditions is not None:
        status["conditions"] = conditions
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    meta: dict[str, Any] = {"name": "p", "annotations": {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T04:00:00Z"
    if stop_reason:
        meta["annotations"][fates.STOP_REASON_ANNOTATION] = stop_reason
    return {"metadata": meta, "status": status}


def container(**state: Any) -> dict[str, Any]:
    return {"name": "job", "state": state}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return container(waiting={"reason": reason, "message": message})


RUNNING = container(running={"startedAt": "2026-11-30T04:00:05Z"})


def terminated(reason: str, code: int) -> dict[str, Any]:
    return container(terminated={"reason": reason, "exitCode": code,
                                 "startedAt": "2026-11-30T04:00:05Z"})


def test_a_pending_pod_before_its_deadline_is_left_alone() -> None:
    for state in (pod(), pod(containers=[waiting("ErrImagePull")]),
                  pod(conditions=[{"type": "PodScheduled", "status": "False",
                                   "reason": "Unschedulable"}])):
        assert fates.judge(state, age=DEADLINE - 1, deadline=DEADLINE) == fates.PENDING


def test_a_running_pod_is_left_alone_whatever_its_age() -> None:
    assert fates.judge(pod("Running", containers=[RUNNING]), age=10 * DEADLINE,
                          deadline=DEADLINE) == fates.PENDING


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_an_image_that_never_pulls_is_image_pull_at_the_deadline(reason: str) -> None:
    verdict = fates.judge(pod(containers=[waiting(reason, "no such image example/x:9")]),
                             age=DEADLINE, deadline=DEADLINE)
    assert verdict.cause == "image_pull" and verdict.delete
    assert reason in verdict.message and "example/x:9" in verdict.message


def test_a_pod_no_node_takes_is_unschedulable_at_the_deadline() -> None:
    verdict = fates.judge(pod(conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory."}]),
        age=DEADLINE + 5, deadline=DEADLINE)
    assert verdict.cause == "unschedulable" and verdict.delete
    assert "Insufficient memory" in verdict.message


def test_any_other_pod_not_running_at_the_deadline_is_start_deadline() -> None:
    verdict = fates.judge(pod(containers=[waiting("CreateContainerConfigError",
                                                     "secret \"db\" not found")]),
                             age=DEADLINE, deadline=DEADLINE)
    assert verdict.cause == "start_deadline" and verdict.delete
    assert "CreateContainerConfigError" in verdict.message
    assert fates.judge(pod(), age=DEADLINE, deadline=DEADLINE).cause == "start_deadline"


def test_an_oom_killed_container_is_oom_killed() -> None:
    verdict = fates.judge(pod("Failed", containers=[terminated("OOMKilled", 137)]),
                             age=1, deadline=DEADLINE)
    assert verdict == fates.Verdict("oom_killed",
                                       "container job was OOM-killed (exit code 137)")


def test_an_evicted_pod_is_evicted() -> None:
    verdict = fates.judge(pod("Failed", reason="Evicted",
                                 message="The node was low on resource: memory."),
                             age=1, deadline=DEADLINE)
    assert verdict.cause == "evicted" and "low on resource" in verdict.message
    condition = {"type": "DisruptionTarget", "status": "True",
                 "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
    evicting = pod("Running", containers=[RUNNING], conditions=[condition])
    # Still running its grace period: its process may record the outcome; judged at the end.
    assert fates.judge(evicting, age=1, deadline=DEADLINE) == fates.PENDING
    ended = pod("Failed", containers=[terminated("Error", 143)], conditions=[condition])
    assert fates.judge(ended, age=1, deadline=DEADLINE).cause == "evicted"
    gone = fates.judge(evicting, age=1, deadline=DEADLINE, deleted=True)
    assert gone.cause == "evicted" and "Eviction API" in gone.message


def test_a_pod_whose_node_is_gone_is_node_lost() -> None:
    assert fates.judge(pod("Unknown", reason="NodeLost"), age=1,
                          deadline=DEADLINE).cause == "node_lost"
    verdict = fates.judge(pod("Running", containers=[RUNNING], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint"}]), age=1,
        deadline=DEADLINE)
    assert verdict.cause == "node_lost"


@pytest.mark.parametrize(("reason", "code"), [("Error", 137), ("Completed", 0), ("Error", 1)])
def test_a_container_that_ended_is_killed_unless_the_job_recorded_its_outcome(
        reason: str, code: int) -> None:
    """The verdict is 'killed' whatever the exit: fail_pod_run is fenced on the claim, so a
    process that recorded its outcome before exiting is not touched by it."""
    verdict = fates.judge(pod("Failed", containers=[terminated(reason, code)]), age=1,
                             deadline=DEADLINE)
    assert verdict.cause == "killed" and f"exit code {code}" in verdict.message
    assert not verdict.delete


def test_a_pod_the_operator_stopped_for_replace_is_replaced() -> None:
    ended = pod("Failed", containers=[terminated("Error", 143)], stop_reason="replaced")
    assert fates.judge(ended, age=1, deadline=DEADLINE).cause == "replaced"
    assert fates.judge(pod(stop_reason="replaced"), age=1, deadline=DEADLINE,
                          deleted=True).cause == "replaced"


def test_a_terminating_pod_is_given_time_to_record_its_outcome() -> None:
    assert fates.judge(pod("Running", containers=[RUNNING], deleting=True), age=1,
                          deadline=DEADLINE) == fates.PENDING
    # Also one the operator is stopping for Replace: the process gets SIGTERM and
    # records the cancellation itself; only its end (or the pod's) is a verdict.
    assert fates.judge(pod("Running", containers=[RUNNING], deleting=True,
                              stop_reason="replaced"), age=1,
                          deadline=DEADLINE) == fates.PENDING


def test_a_pod_deleted_before_an_outcome_is_deleted() -> None:
    assert fates.judge(pod("Running", containers=[RUNNING]), age=1, deadline=DEADLINE,
                          deleted=True).cause == "deleted"
    assert fates.judge(None, age=1, deadline=DEADLINE, deleted=True).cause == "deleted"


def test_a_pod_deleted_at_its_start_deadline_keeps_that_cause() -> None:
    assert fates.judge(pod(stop_reason="image_pull"), age=1, deadline=DEADLINE,
                          deleted=True).cause == "image_pull"


def test_started_and_when() -> None:
    assert not fates.started(pod())
    assert fates.started(pod("Running", containers=[RUNNING]))
    assert fates.started(pod("Failed", containers=[terminated("OOMKilled", 137)]))
    at = fates.started_at(pod("Running", containers=[RUNNING]))
    assert at is not None and at.isoformat() == "2026-11-30T04:00:05+00:00"
    assert fates.started_at(pod()) is None


def test_every_cause_has_an_event_reason() -> None:
    assert set(fates.EVENT_REASONS) == set(POD_FAILURE_CAUSES)
