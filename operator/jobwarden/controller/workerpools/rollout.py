"""What a ``WorkerPool`` pass should do, from what is observed now: pure.

The reconciler keeps no state of its own. Every pass reads the pool's pods
(their template-hash label, phase, readiness, deletion mark and the operator's
drain annotation) and the host registry (running jobs, drain in force), and
:func:`decide` turns that into actions. An operator that restarts in the middle
of a rollout therefore resumes where the cluster and the database say it is:
the drain decision lives in a pod annotation, the drain itself in the hosts
table, the version in a pod label.

The rules, in order:

1. A pod being deleted (``deletionTimestamp``) is already on its way out; it is
   only counted in ``replicas``.
2. A dead pod (phase ``Failed``/``Succeeded``) is deleted and replaced; its
   unfinished jobs go to the reaper (judged by their own heartbeats).
3. A draining pod (the operator's annotation) is deleted once its host is idle
   (nothing running), or when its drain timeout passed (the jobs still running are
   left to the reaper and counted) -- in both cases only while its drain stays in
   force for :data:`DRAIN_LEFT_TO_DELETE` more seconds (or the host is gone). A drain
   that did not take (the host registered after the drain, or the drain expired), or
   one about to expire, is issued again first, and a later pass deletes: a drain that
   lapses between this pass's read of the registry and the deletion would let the
   host claim a job that the deletion then interrupts (seen when a restarted operator
   on a loaded machine came back to a rollout near the drain's expiry).
4. Rollout: old-version pods that are not ready are drained at once (they serve
   nothing); ready ones only as long as ``ready >= replicas - maxUnavailable``
   still holds afterwards. New pods are created up to ``replicas``, with at
   most ``replicas + maxSurge`` non-draining pods while old ones remain. So with
   ``maxUnavailable: 0`` a replacement is ready before an old host is drained.
5. Scaling down drains the excess: old versions first, then pods not ready,
   then the least busy host, then the newest pod.

Draining pods do not count against ``maxSurge`` (like terminating pods in a
Deployment): they claim nothing new, and a long drain must not stall a rollout.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

DEAD_PHASES = frozenset({"Failed", "Succeeded"})
#: An idle host is deleted only while its drain stays in force this much longer
#: (seconds): the time a pass may take between reading the registry and the deletion.
DRAIN_LEFT_TO_DELETE = 30.0

DrainReason = Literal["rollout", "scale-down"]
DeleteReason = Literal["idle", "drain-timeout", "failed"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodView:
    name: str
    template_hash: str
    #: Creation time, epoch seconds.
    created: float
    phase: str
    ready: bool
    terminating: bool = False
    #: When the operator decided to drain it (epoch seconds), None = not draining.
    drain_started: float | None = None
    drain_reason: str | None = None

    @property
    def dead(self) -> bool:
        return self.phase in DEAD_PHASES


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostView:
    #: Jobs in ``processing`` claimed by the host (0 for unknown hosts).
    running: int = 0
    #: The host has a row with live processes in the registry.
    registered: bool = False
    #: A drain is in force on the host row.
    draining: bool = False
    #: Seconds the drain stays in force (database clock); infinite without an expiry.
    drain_left: float = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Desired:
    replicas: int
    template_hash: str
    max_surge: int
    max_unavailable: int
    drain_timeout: float


@dataclasses.dataclass(frozen=True)
class Create:
    count: int


@dataclasses.dataclass(frozen=True)
class Drain:
    pod: str
    reason: str
    #: True: the annotation already records the decision; only the registry drain is re-issued.
    again: bool = False


@dataclasses.dataclass(frozen=True)
class Delete:
    pod: str
    reason: DeleteReason
    #: Jobs still running on the host when it is deleted (left to the reaper).
    running: int = 0


Action = Create | Drain | Delete


@dataclasses.dataclass(frozen=True, kw_only=True)
class Summary:
    """The pool as it will be once this pass's actions are applied (for ``.status``).

    ``replicas`` and ``updated`` count the pods this pass plans to create
    (``planned``); :func:`settle` corrects them to the creates that really
    happened, so ``.status`` (and the scale subresource an HPA reads) never
    counts a pod that was held back or refused.
    """

    replicas: int
    updated: int
    ready: int
    old: int
    draining: tuple[str, ...]
    available: bool
    progressing: bool
    progress_reason: str
    progress_message: str
    #: Pods this pass plans to create (counted in ``replicas`` and ``updated``).
    planned: int = 0
    #: ``spec.replicas``.
    desired: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    actions: tuple[Action, ...]
    summary: Summary


def _host(hosts: Mapping[str, HostView], name: str) -> HostView:
    return hosts.get(name) or HostView()


def decide(desired: Desired, pods: Sequence[PodView], hosts: Mapping[str, HostView], *,
           now: float) -> Plan:
    actions: list[Action] = []
    replicas = max(0, desired.replicas)
    surge = desired.max_surge if desired.max_surge or desired.max_unavailable else 1
    existing = [p for p in pods if not p.terminating]
    draining: list[PodView] = []
    active: list[PodView] = []
    for pod in existing:
        host = _host(hosts, pod.name)
        if pod.dead:
            actions.append(Delete(pod.name, "failed", host.running))
        elif pod.drain_started is not None:
            held = not host.registered or (host.draining
                                           and host.drain_left >= DRAIN_LEFT_TO_DELETE)
            if not held:  # drained again first; a later pass deletes it
                draining.append(pod)
                actions.append(Drain(pod.name, pod.drain_reason or "rollout", again=True))
            elif host.running == 0:
                actions.append(Delete(pod.name, "idle", 0))
            elif now - pod.drain_started >= desired.drain_timeout:
                actions.append(Delete(pod.name, "drain-timeout", host.running))
            else:
                draining.append(pod)
        else:
            active.append(pod)

    new = [p for p in active if p.template_hash == desired.template_hash]
    old = [p for p in active if p.template_hash != desired.template_hash]
    min_available = max(0, replicas - desired.max_unavailable)
    available = sum(1 for p in active if p.ready)

    def busy(pod: PodView) -> tuple[bool, int, float]:
        return pod.ready, _host(hosts, pod.name).running, -pod.created

    to_drain: list[tuple[PodView, DrainReason]] = []
    # Rollout: unready old pods serve nothing; ready ones within the availability budget.
    budget = max(0, available - min_available)
    for pod in sorted(old, key=busy):
        if not pod.ready:
            to_drain.append((pod, "rollout"))
        elif budget > 0:
            to_drain.append((pod, "rollout"))
            budget -= 1
    drained = {p.name for p, _ in to_drain}
    old_left = [p for p in old if p.name not in drained]
    allowed = replicas + surge if old_left else replicas
    # Scaling down: excess old pods beyond the surge allowance, then excess new ones.
    excess = len(old_left) + len(new) - allowed
    for pod in sorted(old_left, key=busy)[:max(0, excess)]:
        to_drain.append((pod, "scale-down"))
    for pod in sorted(new, key=busy)[:max(0, len(new) - replicas)]:
        to_drain.append((pod, "scale-down"))
    drained = {p.name for p, _ in to_drain}
    actions.extend(Drain(p.name, reason) for p, reason in to_drain)

    new_left = [p for p in new if p.name not in drained]
    old_left = [p for p in old if p.name not in drained]
    allowed = replicas + surge if old_left else replicas
    create = min(replicas - len(new_left), allowed - len(new_left) - len(old_left))
    if create > 0:
        actions.append(Create(create))
    created = max(0, create)

    draining_names = tuple(sorted({p.name for p in draining} | drained))
    ready_left = sum(1 for p in new_left + old_left if p.ready)
    old_any = bool(old_left) or any(p.template_hash != desired.template_hash
                                    for p in existing if p.name in draining_names)
    updated = len(new_left) + created
    if old_any:
        reason = "RollingUpdate"
        message = _rolling_message(updated, replicas, len(old_left), len(draining_names))
    elif updated < replicas or ready_left < replicas:
        reason, message = "ScalingUp", f"{ready_left} of {replicas} pod(s) ready"
    elif draining_names or updated > replicas:
        reason, message = "ScalingDown", f"{len(draining_names)} host(s) draining"
    else:
        reason, message = "Complete", f"{replicas} pod(s) ready and up to date"
    summary = Summary(
        replicas=len(existing) + created + sum(1 for p in pods if p.terminating),
        updated=updated, ready=ready_left, old=len(old_left), draining=draining_names,
        available=ready_left >= min_available,
        progressing=reason != "Complete", progress_reason=reason, progress_message=message,
        planned=created, desired=replicas)
    return Plan(actions=tuple(actions), summary=summary)


def _rolling_message(updated: int, replicas: int, old: int, draining: int) -> str:
    return (f"{updated} of {replicas} pod(s) updated, {old} old pod(s) serving, "
            f"{draining} host(s) draining")


def settle(summary: Summary, *, created: int) -> Summary:
    """The summary with only the ``created`` pods of its planned creates counted.

    A create held back (the DSN Secret is missing) or refused (quota, admission)
    made no pod; counting it would tell an autoscaler reading the scale
    subresource that pods exist which do not.
    """
    missing = max(0, summary.planned - max(0, created))
    if not missing:
        return summary
    updated = summary.updated - missing
    message = _rolling_message(updated, summary.desired, summary.old, len(summary.draining)) \
        if summary.progress_reason == "RollingUpdate" else summary.progress_message
    return dataclasses.replace(summary, replicas=summary.replicas - missing, updated=updated,
                               planned=summary.planned - missing, progress_message=message)


# -- status ---------------------------------------------------------------------------------


def conditions_of(summary: Summary, *, replicas: int) -> list[dict[str, Any]]:
    """Condition updates (type, status, reason, message) for Available/Progressing/Draining."""
    available = "True" if summary.available else "False"
    return [
        {"type": "Available", "status": available,
         "reason": "MinimumReplicasAvailable" if summary.available
         else "MinimumReplicasUnavailable",
         "message": f"{summary.ready} of {replicas} pod(s) ready"},
        {"type": "Progressing", "status": "True" if summary.progressing else "False",
         "reason": summary.progress_reason, "message": summary.progress_message},
        {"type": "Draining", "status": "True" if summary.draining else "False",
         "reason": "HostsDraining" if summary.draining else "NoDrain",
         "message": (f"{len(summary.draining)} host(s) draining: "
                     + ", ".join(summary.draining[:20])) if summary.draining
         else "no host is draining"},
    ]


def rollout_started(previous: Mapping[str, Any] | None, summary: Summary) -> bool:
    """A rollout begins in this pass (Progressing was not already RollingUpdate)."""
    return summary.progress_reason == "RollingUpdate" and (
        previous is None or previous.get("reason") != "RollingUpdate")


def rollout_finished(previous: Mapping[str, Any] | None, summary: Summary) -> bool:
    """A rollout ends in this pass: Progressing was RollingUpdate and is no longer."""
    return (previous is not None and previous.get("reason") == "RollingUpdate"
            and summary.progress_reason != "RollingUpdate")
