"""What a ``WorkerPool``'s ``.status`` says after a pass, and the Events it deserves: pure.

The pass (reconciler.py) observes the pool's pods and hosts, lets
:func:`jobwarden.controller.workerpools.rollout.decide` plan, carries the plan
out, and hands what happened -- the plan, the DSN Secret's condition, the
creates refused and made -- to :func:`decide_status`. What comes back is a
value: the status to write, the Events to post (in order) and a finished
rollout's duration; the reconciler only applies it. So every rule below is a
specification with a unit test (tests/pools/test_pool_status.py), no cluster:

* ``Available`` / ``Progressing`` from the rollout's summary, with the
  progress deadline (health.py) behind ``Progressing``;
* ``DSNSecretReady`` and a Warning when it turns False;
* ``ReplicaFailure``: refused creates first, then creates held back for a
  missing Secret, then pods that cannot run (a Warning when that trouble changes);
* ``RolloutStarted`` / ``RolloutComplete`` once per rollout, judged on the
  rollout's own reason even behind a ``ProgressDeadlineExceeded``;
* an invalid spec: ``Progressing=False InvalidSpec`` and one Warning.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.podstate import epoch
from jobwarden.controller.workerpools import health, rollout
from jobwarden.controller.workerpools.spec import PoolSpec
from jobwarden.structs.hosts import HostStatus

#: WorkerPool conditions besides the rollout's (metav1.Condition shape, see kube/status.py).
SECRET_CONDITION = "DSNSecretReady"
#: Named like a ReplicaSet's: True while creating pods fails (quota, admission, template),
#: is held back (no DSN Secret), or a pod cannot run (health.py).
FAILURE_CONDITION = health.FAILURE_CONDITION


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatusPlan:
    """What one pass writes: the whole desired ``.status`` and the Events, in order."""

    status: dict[str, Any]
    events: list[st.Event]
    #: A rollout finished in this pass, this many seconds after it started.
    rollout_seconds: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PassFacts:
    """What a pass saw and did, as far as the status is concerned."""

    name: str
    generation: int | None
    #: ``.status`` as the pass found it.
    previous: Mapping[str, Any]
    spec: PoolSpec
    plan: rollout.Plan
    #: The ``DSNSecretReady`` condition found (pods are created only when it is not False).
    secret: st.Condition
    #: The messages of the creates the API server refused.
    failures: Sequence[str]
    #: Pods created in this pass.
    created: int
    #: The pool's pods as observed (their containers' states).
    pods: Sequence[Mapping[str, Any]]
    now: float
    now_dt: dt.datetime


def desired_of(spec: PoolSpec) -> rollout.Desired:
    return rollout.Desired(replicas=spec.replicas, template_hash=spec.template_hash,
                           max_surge=spec.max_surge, max_unavailable=spec.max_unavailable,
                           drain_timeout=spec.drain_timeout)


def host_views(names: Sequence[str], registered: Mapping[str, HostStatus],
               running: Mapping[str, int]) -> dict[str, rollout.HostView]:
    """The host registry's word on each pod (a pod's host is named after it)."""
    return {n: rollout.HostView(
        running=int(running.get(n, 0)),
        registered=n in registered and registered[n].processes > 0,
        draining=n in registered and registered[n].draining,
        drain_left=drain_left(registered[n]) if n in registered else math.inf)
        for n in names}


def drain_left(host: HostStatus) -> float:
    """Seconds the host's drain stays in force, on the database clock (the row's
    ``last_seen_at`` and how long ago that was); infinite without an expiry."""
    if host.drain_expires_at is None:
        return math.inf
    now = host.last_seen_at + dt.timedelta(seconds=host.seen_seconds_ago)
    return (host.drain_expires_at - now).total_seconds()


def secret_condition(namespace: str, secret: str, key: str, *, keys: frozenset[str] | None,
                     forbidden: str | None = None) -> st.Condition:
    """Whether the DSN Secret and key exist, as the ``DSNSecretReady`` condition.

    ``keys``: the Secret's keys, None when it does not exist; ``forbidden``: why RBAC
    refused the read. Pods of a missing Secret would only sit in
    CreateContainerConfigError, so none are created while it is False.
    """
    ref = f"Secret {namespace}/{secret}"
    if forbidden is not None:
        return st.Condition(type=SECRET_CONDITION, status="Unknown", reason="Forbidden",
                            message=f"cannot read {ref} to check it: {forbidden}")
    if keys is None:
        return st.Condition(type=SECRET_CONDITION, status="False", reason="SecretNotFound",
                            message=f"{ref} (spec.dsnSecretRef) does not exist; "
                                    "no worker pods are created until it does")
    if key not in keys:
        return st.Condition(type=SECRET_CONDITION, status="False", reason="KeyNotFound",
                            message=f"{ref} has no key {key!r} "
                                    "(spec.dsnSecretRef.key); no worker pods are created "
                                    "until it does")
    return st.Condition(type=SECRET_CONDITION, status="True", reason="SecretFound",
                        message=f"{ref} has the key {key!r}")


def invalid_spec(previous: Mapping[str, Any], message: str, *, generation: int | None,
                 now: dt.datetime) -> StatusPlan:
    """An unparseable spec: ``Progressing=False InvalidSpec``; a Warning when that is news."""
    conditions = st.set_conditions(previous.get("conditions"), [st.Condition(
        type="Progressing", status="False", reason="InvalidSpec", message=message)],
        generation=generation, now=now)
    changed = st.condition_of(previous.get("conditions"), "Progressing") != \
        st.condition_of(conditions, "Progressing")
    return StatusPlan(status={**previous, "conditions": conditions},
                      events=[st.Event(type="Warning", reason="InvalidSpec", message=message)]
                      if changed else [])


def failure_condition(facts: PassFacts) -> tuple[st.Condition, list[st.Event]]:
    """``ReplicaFailure``: refused creates, creates held back, then pods that cannot
    run (crash loops, image pulls); a Warning Event whenever a pod's trouble changes."""
    plan, secret = facts.plan, facts.secret
    wants_pods = any(isinstance(a, rollout.Create) for a in plan.actions)
    if facts.failures:
        return st.Condition(type=FAILURE_CONDITION, status="True", reason="FailedCreate",
                            message=facts.failures[0]), []
    if wants_pods and secret.status == "False":
        return st.Condition(
            type=FAILURE_CONDITION, status="True", reason=secret.reason,
            message=f"{plan.summary.planned} pod(s) not created: {secret.message}"), []
    crashing = health.failure(facts.pods)
    if crashing is not None:
        was = st.condition_of(facts.previous.get("conditions"), FAILURE_CONDITION) or {}
        if (was.get("status"), was.get("reason"), was.get("message")) != \
                (crashing.status, crashing.reason, crashing.message):
            return crashing, [st.Event(type="Warning", reason=crashing.reason,
                                       message=crashing.message)]
        return crashing, []
    return st.Condition(type=FAILURE_CONDITION, status="False",
                        reason="PodsCreated" if wants_pods else "NoFailure",
                        message="the last pod creation succeeded" if wants_pods
                        else "no pod creation is failing and no pod is crash-looping"), []


def decide_status(facts: PassFacts) -> StatusPlan:
    """The pool's status after a pass that carried its plan out, and its Events."""
    previous, spec, secret, generation = facts.previous, facts.spec, facts.secret, \
        facts.generation
    summary = rollout.settle(facts.plan.summary, created=facts.created)
    progress = health.progress(previous, summary, generation=generation,
                               deadline=spec.progress_deadline, now=facts.now_dt)
    updates = [st.Condition(type=c["type"], status=c["status"], reason=c["reason"],
                            message=c["message"])
               for c in rollout.conditions_of(summary, replicas=spec.replicas)
               if c["type"] != "Progressing"]
    updates += [progress.condition, secret]
    events: list[st.Event] = []
    before = previous.get("conditions")
    was = st.condition_of(before, SECRET_CONDITION) or {}
    if secret.status == "False" and (was.get("status"), was.get("reason")) != \
            (secret.status, secret.reason):
        events.append(st.Event(type="Warning", reason=secret.reason, message=secret.message))
    failure, failure_events = failure_condition(facts)
    updates.append(failure)
    events += failure_events
    progressing = st.condition_of(before, "Progressing")
    if progress.exceeded and (progressing or {}).get("reason") != health.DEADLINE_REASON:
        events.append(st.Event(type="Warning", reason=health.DEADLINE_REASON,
                               message=f"WorkerPool {facts.name}: {progress.condition.message}"))
    # The rollout's own reason, also behind a ProgressDeadlineExceeded (no second
    # RolloutStarted when progress resumes; a new generation is a new rollout).
    shown = None if progressing is None else {
        **progressing, "reason": health.underlying_reason(progressing)
        if previous.get("observedGeneration") == generation else None}
    if rollout.rollout_started(shown, summary):
        events.append(st.Event(type="Normal", reason="RolloutStarted",
                               message=f"rolling out code version {spec.code_version} "
                                       f"(template {spec.template_hash})"))
    took: float | None = None
    if rollout.rollout_finished(shown, summary):
        since = epoch((progressing or {}).get("lastTransitionTime"))
        if since:
            took = max(0.0, facts.now - since)
        events.append(st.Event(type="Normal", reason="RolloutComplete",
                               message=f"every pod runs code version {spec.code_version}"))
    status: dict[str, Any] = {
        "observedGeneration": generation, "replicas": summary.replicas,
        "updatedReplicas": summary.updated, "readyReplicas": summary.ready,
        "selector": spec.selector, "drainingHosts": list(summary.draining),
        "codeVersion": spec.code_version,
        "conditions": st.set_conditions(before, updates, generation=generation,
                                        now=facts.now_dt),
    }
    if progress.last is not None:
        status[health.PROGRESS_KEY] = progress.last
    return StatusPlan(status=status, events=events, rollout_seconds=took)
