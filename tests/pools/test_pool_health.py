"""pool_health.py: crash-looping pods and the progress deadline, as a Deployment reports them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from jobwarden.controller.workerpools import health as pool_health
from jobwarden.controller.workerpools import rollout

T0 = dt.datetime(2026, 6, 1, 2, 30, tzinfo=dt.UTC)
IMPORT_ERROR = ("jobwarden: error: cannot import app module 'billing.jobs' "
                "(ModuleNotFoundError: No module named 'billing')")


def pod(name: str, *, ready: bool = False, restarts: int = 0,
        state: dict[str, Any] | None = None, last: dict[str, Any] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "worker", "ready": ready, "restartCount": restarts,
                                 "state": state or {"running": {}}}
    if last is not None:
        container["lastState"] = {"terminated": last}
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-06-01T02:30:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [container]}}


CRASHED = {"exitCode": 5, "reason": "Error",
           "message": "starting worker\nloading apps\n" + IMPORT_ERROR + "\n"}
BACKOFF = {"waiting": {"reason": "CrashLoopBackOff",
                       "message": "back-off 10s restarting failed container"}}


def test_a_crash_loop_names_the_pod_the_container_and_its_last_error() -> None:
    condition = pool_health.failure([pod("p-b", restarts=3, state=BACKOFF, last=CRASHED),
                                     pod("p-a", restarts=2, state=BACKOFF, last=CRASHED),
                                     pod("p-c", ready=True)])
    assert condition is not None
    assert (condition.type, condition.status, condition.reason) == (
        "ReplicaFailure", "True", "CrashLoopBackOff")
    assert condition.message == (
        f"pod p-a container worker: CrashLoopBackOff; "
        f"last error: {IMPORT_ERROR} (1 more pod(s) failing)")


def test_a_container_running_again_between_back_offs_is_still_in_the_loop() -> None:
    (trouble,) = pool_health.troubles(pod("p", restarts=4, last=CRASHED))
    assert (trouble.reason, trouble.error) == ("CrashLoopBackOff", IMPORT_ERROR)


def test_without_a_termination_message_the_reason_and_exit_code_are_the_error() -> None:
    (trouble,) = pool_health.troubles(pod("p", restarts=1, state=BACKOFF,
                                          last={"exitCode": 137, "reason": "OOMKilled"}))
    assert trouble.error == "OOMKilled (exit code 137)"


def test_an_image_that_cannot_be_pulled_is_a_failure_with_the_kubelet_s_message() -> None:
    waiting = {"waiting": {"reason": "ImagePullBackOff",
                           "message": 'Back-off pulling image "nope.invalid/app:1"'}}
    condition = pool_health.failure([pod("p", state=waiting)])
    assert condition is not None and condition.reason == "ImagePullBackOff"
    assert 'Back-off pulling image "nope.invalid/app:1"' in condition.message


@pytest.mark.parametrize("healthy", [
    pod("p", ready=True),
    pod("p", ready=True, restarts=2, last=CRASHED),  # restarted once, serving now
    pod("p", state={"waiting": {"reason": "ContainerCreating"}}),
    pod("p", restarts=2, state=BACKOFF, last=CRASHED, deleting=True),
    pod("p", restarts=1, last={"exitCode": 0, "reason": "Completed"}),
], ids=["ready", "recovered", "starting", "deleting", "clean-exit"])
def test_healthy_or_starting_pods_are_no_failure(healthy: dict[str, Any]) -> None:
    assert pool_health.failure([healthy]) is None


def summary(*, ready: int = 0, updated: int = 3, replicas: int = 3,
            reason: str = "ScalingUp", draining: tuple[str, ...] = ()) -> rollout.Summary:
    return rollout.Summary(
        replicas=replicas, updated=updated, ready=ready, old=replicas - updated,
        draining=draining, available=False, progressing=reason != "Complete",
        progress_reason=reason, progress_message=f"{ready} of 3 pod(s) ready", desired=3)


def status(*, since: dt.datetime, ready: int = 0, updated: int = 3, replicas: int = 3,
           reason: str = "ScalingUp", generation: int = 1, **more: Any) -> dict[str, Any]:
    return {"observedGeneration": generation, "readyReplicas": ready,
            "updatedReplicas": updated, "replicas": replicas,
            "lastProgressTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "conditions": [{"type": "Progressing", "status": "True", "reason": reason,
                            "message": "x", **more}]}


def test_no_progress_for_longer_than_the_deadline_is_progress_deadline_exceeded() -> None:
    previous = status(since=T0)
    within = pool_health.progress(previous, summary(), generation=1, deadline=600,
                                  now=T0 + dt.timedelta(seconds=600))
    assert not within.exceeded and within.condition.reason == "ScalingUp"
    assert within.last == "2026-06-01T02:30:00Z"  # unchanged: nothing to write
    past = pool_health.progress(previous, summary(), generation=1, deadline=600,
                                now=T0 + dt.timedelta(seconds=601))
    assert past.exceeded
    assert (past.condition.status, past.condition.reason) == ("False",
                                                              "ProgressDeadlineExceeded")
    assert past.condition.message.startswith("ScalingUp: no progress for more than 600s")
    assert pool_health.underlying_reason(
        {"reason": past.condition.reason, "message": past.condition.message}) == "ScalingUp"


@pytest.mark.parametrize(("now_summary", "generation"), [
    (summary(ready=1), 1), (summary(updated=3, replicas=3), 2),
    (summary(updated=2, replicas=2), 1),
], ids=["a-pod-became-ready", "a-new-generation", "an-old-pod-went"])
def test_progress_restarts_the_clock(now_summary: rollout.Summary, generation: int) -> None:
    previous = status(since=T0, updated=2 if generation == 1 and now_summary.replicas == 2
                      else 3, replicas=3)
    later = T0 + dt.timedelta(seconds=900)
    found = pool_health.progress(previous, now_summary, generation=generation, deadline=600,
                                 now=later)
    assert not found.exceeded and found.last == "2026-06-01T02:45:00Z"


def test_a_pool_waiting_for_its_draining_hosts_is_not_past_its_deadline() -> None:
    found = pool_health.progress(status(since=T0, reason="RollingUpdate"),
                                 summary(reason="RollingUpdate", draining=("old-1",)),
                                 generation=1, deadline=60, now=T0 + dt.timedelta(hours=1))
    assert not found.exceeded


def test_a_complete_pool_writes_no_progress_time_and_a_new_scale_up_starts_one() -> None:
    complete = status(since=T0, reason="Complete", ready=3)
    done = pool_health.progress(complete, summary(ready=3, reason="Complete"), generation=1,
                                deadline=600, now=T0 + dt.timedelta(hours=5))
    assert not done.exceeded and done.last == "2026-06-01T02:30:00Z"
    again = pool_health.progress(complete, summary(ready=2), generation=1, deadline=600,
                                 now=T0 + dt.timedelta(hours=5))
    assert not again.exceeded and again.last == "2026-06-01T07:30:00Z"
