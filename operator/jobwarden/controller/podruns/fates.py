"""What a run pod's state means for its job: pure, from the Pod object alone.

Why this matters: the job row is claimed by the operator, not by the process in
the pod, and the process can only record an outcome it lives to see. Every way
a pod ends without one -- it never started (image pull, scheduling, a deadline),
the kernel OOM-killed it, the kubelet evicted it, its node disappeared, its
process was killed, it was deleted -- must still end the claim by the dead
worker's rules (idempotent -> retried, otherwise ``interrupted``), with the cause
in the job's error and an Event. The operator calls
``jobwarden.podruns.fail_pod_run`` with the cause this module names; the call is
fenced on the claim token, so a verdict on a pod whose process did record its
outcome changes nothing.

A verdict is only reached from facts that cannot change back: a terminated
container, a pod phase of Failed/Succeeded, a deletion, a lost node, or "not
running at the start deadline" (that pod is then deleted, so it cannot start
late). A pod being evicted with a grace period is judged when it has ended, not
when the eviction began: its process may still finish the job within the grace,
and that outcome must not be overwritten.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from jobwarden.controller.kube.podstate import container_statuses, parse_time
from jobwarden.structs.podruns import PodFailureCause

#: The Event reason posted for each cause (CamelCase, as Kubernetes reasons are).
EVENT_REASONS: dict[str, str] = {
    "image_pull": "PodImagePullFailed", "unschedulable": "PodUnschedulable",
    "start_deadline": "PodStartDeadlineExceeded", "oom_killed": "PodOOMKilled",
    "evicted": "PodEvicted", "node_lost": "PodNodeLost", "killed": "PodKilled",
    "deleted": "PodDeleted", "replaced": "PodReplaced", "error": "PodRunFailed",
}
#: ``jobwarden.io/stop-reason`` annotations the operator writes before deleting a pod.
STOP_CAUSES: dict[str, PodFailureCause] = {
    "replaced": "replaced", "image_pull": "image_pull", "unschedulable": "unschedulable",
    "start_deadline": "start_deadline",
}
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                "ErrImageNeverPull", "RegistryUnavailable"})
#: DisruptionTarget condition reasons (k8s.io/api/core/v1) -> cause.
DISRUPTIONS: dict[str, PodFailureCause] = {
    "EvictionByEvictionAPI": "evicted", "PreemptionByScheduler": "evicted",
    "TerminationByKubelet": "evicted", "DeletionByTaintManager": "node_lost",
    "DeletionByPodGC": "node_lost",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The run ended (``cause``) or has not yet (``cause`` None)."""

    cause: PodFailureCause | None
    message: str = ""
    #: The pod must be deleted (it never started and must not start late).
    delete: bool = False


PENDING = Verdict(None)
STOP_REASON_ANNOTATION = "jobwarden.io/stop-reason"


def started(pod: Mapping[str, Any]) -> bool:
    """Did any container of the pod run (it may have ended since)?"""
    for state in container_statuses(pod):
        current = state.get("state") or {}
        if current.get("running") or current.get("terminated") or state.get("lastState", {}).get(
                "terminated"):
            return True
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded")


def started_at(pod: Mapping[str, Any]) -> dt.datetime | None:
    """When the first container started running, as the kubelet reports it."""
    found: list[dt.datetime] = []
    for state in container_statuses(pod):
        for key in ("running", "terminated"):
            raw = ((state.get("state") or {}).get(key) or {}).get("startedAt")
            parsed = parse_time(raw)
            if parsed is not None:
                found.append(parsed)
    return min(found) if found else None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first terminated state of a (non-init) container, if any ended."""
    for state in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (state.get("state") or {}).get("terminated")
        if ended:
            return dict(ended, container=state.get("name"))
    return None


def _disruption(pod: Mapping[str, Any]) -> tuple[PodFailureCause, str] | None:
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    if reason == "Evicted":
        return "evicted", str(status.get("message") or "evicted by the kubelet")
    if reason == "NodeLost":
        return "node_lost", str(status.get("message") or "the pod's node was lost")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            cause = DISRUPTIONS.get(str(condition.get("reason")))
            if cause is not None:
                return cause, str(condition.get("message") or condition.get("reason"))
    return None


def _not_started(pod: Mapping[str, Any], deadline: float) -> Verdict:
    waiting = [((s.get("state") or {}).get("waiting") or {}) for s in container_statuses(pod)]
    pulls = [w for w in waiting if w.get("reason") in IMAGE_PULL_REASONS]
    if pulls:
        return Verdict("image_pull", f"not started within {deadline:g}s: "
                                     f"{pulls[0].get('reason')}: {pulls[0].get('message', '')}"
                                     .rstrip(": "), delete=True)
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = condition.get("message") or condition.get("reason")
            return Verdict("unschedulable", f"not scheduled within {deadline:g}s: {why}",
                           delete=True)
    other = next((w for w in waiting if w.get("reason")), None)
    detail = f": {other.get('reason')}: {other.get('message', '')}".rstrip(": ") if other else ""
    return Verdict("start_deadline", f"no container running within {deadline:g}s{detail}",
                   delete=True)


def judge(pod: Mapping[str, Any] | None, *, age: float, deadline: float,
          deleted: bool = False) -> Verdict:
    """The verdict on one run pod.

    ``age`` is the seconds since the claim, ``deadline`` the resource's
    ``startDeadlineSeconds``; ``deleted`` says the pod is gone (a watch DELETED
    event, or absent from a list). ``pod`` is the last state seen (None when the
    pod was never seen: it was not created, or deleted before any look).
    """
    meta = (pod or {}).get("metadata") or {}
    stop_reason = (meta.get("annotations") or {}).get(STOP_REASON_ANNOTATION)
    if pod is not None:
        ended = _terminated(pod)
        if ended is not None and ended.get("reason") == "OOMKilled":
            return Verdict("oom_killed", f"container {ended.get('container')} was OOM-killed "
                                         f"(exit code {ended.get('exitCode')})")
        disrupted = _disruption(pod)
        if disrupted is not None:
            phase = (pod.get("status") or {}).get("phase")
            if ended is None and not deleted and disrupted[0] != "node_lost" \
                    and phase not in ("Failed", "Succeeded"):
                # Evicted with a grace period (the Eviction API, preemption, a kubelet's
                # soft eviction): the process got SIGTERM and may still finish and record
                # its outcome; judged once its container ended or the pod is gone. A lost
                # node reports nothing more: judged at once.
                return PENDING
            return Verdict(disrupted[0], disrupted[1])
        if ended is not None:
            stopped = STOP_CAUSES.get(str(stop_reason))
            if stopped is not None:
                return Verdict(stopped, f"pod stopped by the operator ({stop_reason}); "
                                        f"exit code {ended.get('exitCode')}")
            return Verdict("killed", f"container {ended.get('container')} ended "
                                     f"(exit code {ended.get('exitCode')}, "
                                     f"{ended.get('reason') or 'no reason'}) without the job "
                                     "recording an outcome")
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            return Verdict("killed", f"pod {phase} without the job recording an outcome")
    if meta.get("deletionTimestamp") and not deleted:
        # Terminating: the process got SIGTERM and may still record its outcome (a
        # cancelled run does); the verdict waits for the container's end or the pod's.
        return PENDING
    if deleted:
        stopped = STOP_CAUSES.get(str(stop_reason))
        if stopped is not None:
            return Verdict(stopped, f"pod deleted by the operator ({stop_reason})")
        return Verdict("deleted", "pod deleted before the job recorded an outcome")
    if pod is not None and not started(pod) and age >= deadline:
        return _not_started(pod, deadline)
    return PENDING
