"""Is a ``WorkerPool`` getting anywhere? Crash-looping pods and the progress deadline: pure.

Why: a pool whose pods crash-loop (an app module that does not import, a bad
image) looked healthy: ``Progressing=True ScalingUp``, ``ReplicaFailure=False``
and no Warning Event, for ever. A Deployment answers the same question with
two signals, and a pool now gives both:

* ``ReplicaFailure=True`` while a pod's container cannot run: waiting in
  ``CrashLoopBackOff`` (or restarting after an error exit and not ready),
  ``ErrImagePull`` / ``ImagePullBackOff``, ``CreateContainerConfigError`` ...
  The message names the pod, the container and its last error: the
  terminated state's ``message`` (the worker container runs with
  ``terminationMessagePolicy: FallbackToLogsOnError``, so the kubelet puts the
  tail of its output there, e.g. ``cannot import app module``), else its
  reason and exit code. A Warning Event says the same, once per change.
* ``spec.progressDeadlineSeconds`` (default 600, as a Deployment's): while
  the pool is progressing (scaling up, rolling out), ``status.lastProgressTime``
  moves whenever it gets nearer its goal -- more pods updated or ready, fewer
  old ones, a new generation. Once it has not moved for longer than the
  deadline, ``Progressing=False`` with reason ``ProgressDeadlineExceeded``
  (and a Warning Event), until progress resumes. A pool waiting for draining
  hosts is not stuck: their own timeout (``drainTimeoutSeconds``) bounds it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from jobwarden.controller.kube.podstate import container_statuses, parse_time
from jobwarden.controller.kube.status import Condition, condition_of, timestamp
from jobwarden.controller.workerpools import rollout

FAILURE_CONDITION = "ReplicaFailure"
DEADLINE_REASON = "ProgressDeadlineExceeded"
#: ``status.lastProgressTime``: when the pool last got nearer its goal.
PROGRESS_KEY = "lastProgressTime"
#: Waiting reasons of a container that will not run without a change (the kubelet's).
STUCK_WAITING = frozenset({
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull",
    "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
    "RunContainerError", "PreCreateHookError", "PostStartHookError"})
#: The most of a container's last error a condition or Event carries.
ERROR_LIMIT = 500


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trouble:
    """One container that cannot run, and why."""

    pod: str
    container: str
    reason: str
    restarts: int
    error: str

    def describe(self) -> str:
        """No restart count: the message (and its Event) changes only with the trouble."""
        return f"pod {self.pod} container {self.container}: {self.reason}; last error: {self.error}"


def _last_line(text: str) -> str:
    """The last non-empty line (a traceback's or a log tail's is the error itself)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:ERROR_LIMIT] if lines else ""


def _terminated_error(terminated: Mapping[str, Any]) -> str:
    message = _last_line(str(terminated.get("message") or ""))
    if message:
        return message
    reason = str(terminated.get("reason") or "Error")
    return f"{reason} (exit code {terminated.get('exitCode')})"


def troubles(pod: Mapping[str, Any]) -> list[Trouble]:
    """The containers of ``pod`` that cannot run (none for a healthy or finished pod)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return []
    found: list[Trouble] = []
    for container in container_statuses(pod):
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        terminated = state.get("terminated") or {}
        restarts = int(container.get("restartCount") or 0)
        reason = str(waiting.get("reason") or "")
        if reason in STUCK_WAITING:
            if last and reason == "CrashLoopBackOff":
                error = _terminated_error(last)
            else:
                error = _last_line(str(waiting.get("message") or "")) or reason
        elif terminated and terminated.get("exitCode") not in (0, None):
            reason, error = str(terminated.get("reason") or "Error"), \
                _terminated_error(terminated)
        elif restarts and last and last.get("exitCode") not in (0, None) \
                and not container.get("ready"):
            # Between two back-offs the container runs again for a moment: still a loop.
            reason, error = "CrashLoopBackOff", _terminated_error(last)
        else:
            continue
        found.append(Trouble(pod=str(meta.get("name")), container=str(container.get("name")),
                             reason=reason, restarts=restarts, error=error))
    return found


def failure(pods: Sequence[Mapping[str, Any]]) -> Condition | None:
    """``ReplicaFailure=True`` naming the first pod in trouble (by name), or None."""
    found = sorted((t for p in pods for t in troubles(p)), key=lambda t: (t.pod, t.container))
    if not found:
        return None
    first = found[0]
    others = len({t.pod for t in found}) - 1
    more = f" ({others} more pod(s) failing)" if others else ""
    return Condition(type=FAILURE_CONDITION, status="True", reason=first.reason,
                     message=first.describe() + more)


def underlying_reason(progressing: Mapping[str, Any] | None) -> str | None:
    """The rollout's own reason behind a Progressing condition (the deadline's hides it)."""
    if progressing is None:
        return None
    reason = progressing.get("reason")
    if reason == DEADLINE_REASON:
        return str(progressing.get("message") or "").split(":", 1)[0] or None
    return None if reason is None else str(reason)


def progressed(previous: Mapping[str, Any], summary: rollout.Summary, *,
               generation: int | None) -> bool:
    """Did the pool get nearer its goal since the status was written?"""
    before = underlying_reason(condition_of(previous.get("conditions"), "Progressing"))
    if before in (None, "Complete", "InvalidSpec") or previous.get(PROGRESS_KEY) is None:
        return True  # progress (re)starts now
    if previous.get("observedGeneration") != generation:
        return True
    ready, updated = int(previous.get("readyReplicas") or 0), \
        int(previous.get("updatedReplicas") or 0)
    old = int(previous.get("replicas") or 0) - updated
    return (summary.ready > ready or summary.updated > updated
            or summary.replicas - summary.updated < old)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    #: ``status.lastProgressTime`` to write (None: none yet).
    last: str | None
    #: The Progressing condition to write (the rollout's own, or the deadline's).
    condition: Condition
    exceeded: bool


def progress(previous: Mapping[str, Any], summary: rollout.Summary, *,
             generation: int | None, deadline: int, now: dt.datetime) -> Progress:
    """The progress clock and the Progressing condition for this pass."""
    own = Condition(type="Progressing", status="True" if summary.progressing else "False",
                    reason=summary.progress_reason, message=summary.progress_message)
    last = previous.get(PROGRESS_KEY)
    if summary.progressing and progressed(previous, summary, generation=generation):
        last = timestamp(now)
    since = parse_time(last) if isinstance(last, str) else None
    if not summary.progressing or summary.draining or since is None \
            or (now - since).total_seconds() <= deadline:
        return Progress(last=last if isinstance(last, str) else None, condition=own,
                        exceeded=False)
    return Progress(last=str(last), exceeded=True, condition=Condition(
        type="Progressing", status="False", reason=DEADLINE_REASON,
        message=f"{summary.progress_reason}: no progress for more than {deadline}s "
                f"(since {last}); {summary.progress_message}"))
