"""``WorkerPool`` -> worker pods, scaled and rolled out drain-first.

The operator owns the pods itself (no Deployment) so that it can drain a host
through the host registry before the pod goes: the host stops claiming, keeps
heartbeating, finishes what it runs, and only then is its pod deleted (or at the
drain timeout, leaving the rest to the reaper).

Level-triggered like the other reconcilers: kopf's create/update/resume handlers
and the operator's resync loop (every ``JOBWARDEN_POOL_INTERVAL`` seconds,
default 2, and at once when one of the pool's pods changes) run the same pass:
observe (the pool's pods, the hosts table), decide
(:func:`jobwarden.controller.workerpools.rollout.decide`, pure), act (create, annotate +
drain, delete), mirror into ``.status`` and post Events. Nothing lives only in
memory: the drain decision is a pod annotation written *before* the registry
drain, the version is a pod label, so a restarted operator picks a rollout up
where it stood. A lock per pool keeps two passes of one pool apart.

Observing costs no API call: the pods come from the operator's pod watch
(an informer-style cache, :mod:`jobwarden.controller.kube.caching`; kopf watches
the pods labelled ``jobwarden.io/pool``), into which the operator's own
creates, annotations and deletes are written as the API server answered them.
Once every :data:`POD_LIST_SECONDS` (and at a pool's first pass) one LIST of
the pool's pods corrects the cache. The DSN Secret is read again at most every
:data:`SECRET_RECHECK_SECONDS` (every :data:`SECRET_RETRY_SECONDS` while it is
missing), the PodDisruptionBudget every :data:`PDB_RECHECK_SECONDS`, except on a
spec change (kopf's handlers), which reads both at once. An idle pool with a
Secret and no budget costs about one API call a minute (docs/operator.md).

Deleting a ``WorkerPool`` leaves its pods to the garbage collector (owner
references); each worker then drains itself on SIGTERM within its grace period.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

from jobwarden import errors
from jobwarden.controller import handlers
from jobwarden.controller.kube import events
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.caching import ObjectCache, owners_of
from jobwarden.controller.kube.client import api_reason
from jobwarden.controller.kube.kinds import Kind
from jobwarden.controller.kube.pods import KubePods
from jobwarden.controller.kube.podstate import epoch
from jobwarden.controller.runtime import Runtime
from jobwarden.controller.specs import SpecError
from jobwarden.controller.workerpools import rollout
from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.controller.workerpools import status as pool_status
from jobwarden.observability import metrics

logger = logging.getLogger("jobwarden.controller.pools")

KIND = "WorkerPool"
RESOURCE = ("jobwarden.io", "v1alpha1", "workerpools")
POOL_KEYS = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "selector",
             "drainingHosts", "codeVersion", "lastProgressTime", "conditions")
#: A registry drain outlives the drain timeout by this much, so it cannot lapse
#: (and let the host claim again) between the timeout and the pod's deletion.
DRAIN_EXPIRY_MARGIN = 60.0
#: Grace of a pod deleted at its drain timeout: the drain already had its time.
TIMEOUT_DELETE_GRACE = 10
#: One LIST of a pool's pods this often corrects the watch-fed cache (seconds).
POD_LIST_SECONDS = 300.0
#: The DSN Secret found: read again this often; missing: this often (seconds).
SECRET_RECHECK_SECONDS = 60.0
SECRET_RETRY_SECONDS = 5.0
#: The PodDisruptionBudget as wanted: read again this often (seconds).
PDB_RECHECK_SECONDS = 300.0
#: The passes of the resync loop (the others are kopf's: a spec change or a restart).
PERIODIC_TRIGGERS = frozenset({"resync", "nudge"})


def pool_interval(env: dict[str, str] | None = None) -> float:
    raw = (os.environ if env is None else env).get("JOBWARDEN_POOL_INTERVAL", "").strip()
    if not raw:
        return 2.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise errors.ConfigurationError(
            f"JOBWARDEN_POOL_INTERVAL must be a number of seconds, not {raw!r}") from exc
    if value < 0.1:
        raise errors.ConfigurationError(f"JOBWARDEN_POOL_INTERVAL must be at least 0.1, not {raw}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Applied:
    """What carrying a plan out did."""

    events: list[st.Event]
    #: The messages of the creates the API server refused (the rest were not tried).
    failures: list[str]
    #: The names of the pods created.
    created: list[str]


def pod_view(pod: dict[str, Any]) -> rollout.PodView:
    """What the decision needs from a pod manifest (pure)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    started: float | None = None
    raw = annotations.get(pools_spec.DRAIN_STARTED_ANNOTATION)
    if raw:
        try:
            started = float(raw)
        except ValueError:
            started = 0.0  # unreadable: treat as long started (drained, timed out)
    return rollout.PodView(
        name=str(meta.get("name")), template_hash=str(labels.get(pools_spec.HASH_LABEL, "")),
        created=epoch(meta.get("creationTimestamp")) or 0.0, phase=str(status.get("phase") or ""),
        ready=ready and status.get("phase") == "Running",
        terminating=bool(meta.get("deletionTimestamp")),
        drain_started=started, drain_reason=annotations.get(pools_spec.DRAIN_REASON_ANNOTATION))


class PoolReconciler:
    def __init__(self, runtime: Runtime, pods: KubePods | None = None,
                 cache: ObjectCache | None = None) -> None:
        self.runtime = runtime
        self.pods = pods or runtime.pods
        #: The pod watch's cache; None: every pass LISTs (tests of one pass).
        self.cache = cache
        self._locks: collections.defaultdict[str, threading.Lock] = \
            collections.defaultdict(threading.Lock)
        #: Pool uid -> "no budget wanted and none exists" as of the last look.
        self._no_pdb: dict[str, bool] = {}
        #: Pool uid -> (when, the budget spec) last found as wanted.
        self._pdb_seen: dict[str, tuple[float, str]] = {}
        #: Pool uid -> (when, (namespace, secret, key), the condition found).
        self._secret_seen: dict[str, tuple[float, tuple[str, str, str], st.Condition]] = {}
        #: Pool uid -> when its pods were last LISTed.
        self._listed: dict[str, float] = {}

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        meta = body.get("metadata", {})
        with self._locks[str(meta.get("uid"))]:
            return self._reconcile(body=body, patch=patch, trigger=trigger)

    def observe(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        """The pool's pods: from the watch's cache, corrected by a LIST now and then."""
        if self.cache is None:
            return self._list(namespace, name, uid)
        now = time.monotonic()
        if self._listed.get(uid, -POD_LIST_SECONDS) + POD_LIST_SECONDS <= now:
            listed = self._list(namespace, name, uid)
            self.cache.replace_owned(uid, listed)
            self._listed[uid] = now
        return [p for p in self.cache.owned_by(uid)
                if (p.get("metadata") or {}).get("namespace", namespace) == namespace]

    def _list(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        return self.pods.list(
            namespace, selector=f"{pools_spec.POOL_LABEL}={pools_spec.label_value(name)}",
            owner_uid=uid)

    def _remember(self, pod: dict[str, Any] | None, *, namespace: str, name: str) -> None:
        """Write an API answer through to the cache (a deleted pod: forget it)."""
        if self.cache is None:
            return
        if pod is not None:
            self.cache.put(pod)
            return
        for cached in self.cache.bodies():
            meta = cached.get("metadata") or {}
            if meta.get("name") == name and meta.get("namespace", namespace) == namespace:
                self.cache.remove(str(meta.get("uid")))

    def _reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        """Parse, observe, decide (pure: rollout.py), apply, then write the status
        :func:`pool_status.decide_status` decided from what was done (pure)."""
        meta = body.get("metadata", {})
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
        uid, generation = str(meta.get("uid")), meta.get("generation")
        metrics.prime_pool(name)
        previous: dict[str, Any] = dict(body.get("status") or {})
        now_dt = dt.datetime.now(dt.UTC)
        try:
            spec = pools_spec.parse_pool(name, body.get("spec"))
        except SpecError as exc:
            invalid = pool_status.invalid_spec(previous, str(exc), generation=generation,
                                               now=now_dt)
            self._write(body, patch, previous, invalid)
            self.runtime.reconciled(KIND, "invalid")
            return "invalid"
        manifests = self.observe(namespace, name, uid)
        views = [pod_view(p) for p in manifests]
        hosts = self._hosts(name, [v.name for v in views])
        now = time.time()
        plan = rollout.decide(pool_status.desired_of(spec), views, hosts, now=now)
        self._converge_pdb(spec, namespace=namespace, uid=uid, trigger=trigger)
        secret = self._secret_condition(spec, namespace, uid=uid, trigger=trigger)
        done = self._apply(plan, spec=spec, namespace=namespace, uid=uid, now=now,
                           trigger=trigger, create=secret.status != "False")
        decided = pool_status.decide_status(pool_status.PassFacts(
            name=name, generation=generation, previous=previous, spec=spec, plan=plan,
            secret=secret, failures=done.failures, created=len(done.created),
            pods=manifests, now=now, now_dt=now_dt))
        if decided.rollout_seconds is not None:
            metrics.ROLLOUT_DURATION.labels(name).observe(decided.rollout_seconds)
        self._write(body, patch, previous, decided, posted=done.events)
        result = "updated" if plan.actions else "unchanged"
        self.runtime.reconciled(KIND, result)
        return result

    def _hosts(self, pool: str, names: list[str]) -> dict[str, rollout.HostView]:
        """The host registry's word on the pool's pods (the database's only read)."""
        try:
            registered = {h.name: h for h in self.runtime.client.hosts.status(pool=pool)}
            running = self.runtime.client.hosts.running(names) if names else {}
        except errors.DatabaseUnavailable as exc:
            self.runtime.failed(KIND)
            self.runtime.health.database(False)
            raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        self.runtime.health.database(True)
        return pool_status.host_views(names, registered, running)

    def _converge_pdb(self, spec: pools_spec.PoolSpec, *, namespace: str, uid: str,
                      trigger: str = "") -> None:
        """Create, update or delete the pool's PodDisruptionBudget to match the spec.

        Only a budget this pool owns is touched: one of the same name made by
        someone else is left alone (and logged).
        """
        if spec.disruption is None and self._no_pdb.get(uid):
            return  # none wanted, none there when last looked: save the GET every pass
        wanted_key = repr(spec.disruption)
        seen = self._pdb_seen.get(uid)
        if spec.disruption is not None and trigger in PERIODIC_TRIGGERS and seen is not None \
                and seen[1] == wanted_key and time.monotonic() - seen[0] < PDB_RECHECK_SECONDS:
            return  # converged a moment ago
        self._pdb_seen.pop(uid, None)
        current = self.pods.pdb(namespace, spec.name)
        self._no_pdb[uid] = False
        owned = current is not None and any(
            ref.get("uid") == uid
            for ref in (current.get("metadata") or {}).get("ownerReferences") or [])
        wanted = pools_spec.pdb_manifest(spec, namespace=namespace, owner_uid=uid)
        if current is not None and not owned:
            if wanted is not None:
                logger.warning("%s/%s: a PodDisruptionBudget %s exists and is not this pool's; "
                               "left alone", namespace, spec.name, spec.name)
            return
        if wanted is None:
            if current is not None:
                self.pods.delete_pdb(namespace, spec.name)
                logger.info("%s/%s: PodDisruptionBudget deleted", namespace, spec.name)
            self._no_pdb[uid] = True
            return
        if current is None or {k: (current.get("spec") or {}).get(k)
                               for k in ("maxUnavailable", "minAvailable", "selector")} != \
                {k: wanted["spec"].get(k) for k in ("maxUnavailable", "minAvailable",
                                                    "selector")}:
            if current is not None:  # a merge patch cannot drop the other field; say so
                wanted["spec"].setdefault("maxUnavailable", None)
                wanted["spec"].setdefault("minAvailable", None)
            self.pods.put_pdb(namespace, wanted, exists=current is not None)
            logger.info("%s/%s: PodDisruptionBudget %s (%s)", namespace, spec.name,
                        "updated" if current is not None else "created", spec.disruption)
        self._pdb_seen[uid] = (time.monotonic(), wanted_key)

    def _secret_condition(self, spec: pools_spec.PoolSpec, namespace: str, *, uid: str,
                          trigger: str) -> st.Condition:
        """:meth:`_check_secret`, read again only when due or on a spec change."""
        key = (namespace, spec.dsn_secret, spec.dsn_key)
        seen = self._secret_seen.get(uid)
        if trigger in PERIODIC_TRIGGERS and seen is not None and seen[1] == key:
            every = SECRET_RECHECK_SECONDS if seen[2].status == "True" else SECRET_RETRY_SECONDS
            if time.monotonic() - seen[0] < every:
                return seen[2]
        found = self._check_secret(spec, namespace)
        self._secret_seen[uid] = (time.monotonic(), key, found)
        return found

    def _check_secret(self, spec: pools_spec.PoolSpec, namespace: str) -> st.Condition:
        """Read the DSN Secret's keys (never its values) into ``DSNSecretReady``."""
        try:
            keys = self.pods.secret_keys(namespace, spec.dsn_secret)
        except PermissionError as exc:
            return pool_status.secret_condition(namespace, spec.dsn_secret, spec.dsn_key,
                                                keys=None, forbidden=str(exc))
        return pool_status.secret_condition(namespace, spec.dsn_secret, spec.dsn_key, keys=keys)

    def _apply(self, plan: rollout.Plan, *, spec: pools_spec.PoolSpec, namespace: str,
               uid: str, now: float, trigger: str, create: bool = True) -> Applied:
        """Carry the plan out: the Events it is worth, refused creates, pods made."""
        posted: list[st.Event] = []
        failures: list[str] = []
        created: list[str] = []
        expires = spec.drain_timeout + DRAIN_EXPIRY_MARGIN
        for action in plan.actions:
            if isinstance(action, rollout.Drain):
                if not action.again:
                    # The decision first (a pod annotation), then the registry: a crash in
                    # between is repaired by the next pass (annotation set, host not draining).
                    self._remember(self.pods.annotate(namespace, action.pod, {
                        pools_spec.DRAIN_STARTED_ANNOTATION: f"{now:.3f}",
                        pools_spec.DRAIN_REASON_ANNOTATION: action.reason}),
                        namespace=namespace, name=action.pod)
                drained = self.runtime.client.hosts.drain(host=action.pod, expires_in=expires,
                                                          reason=action.reason)
                if not action.again:
                    logger.info("%s/%s: draining host %s (%s)%s [%s]", namespace, spec.name,
                                action.pod, action.reason,
                                "" if drained else " (not registered yet)", trigger)
                    posted.append(st.Event(type="Normal", reason="Draining",
                                           message=f"draining host {action.pod} "
                                                   f"({action.reason}) before deleting its pod"))
            elif isinstance(action, rollout.Delete):
                timed_out = action.reason == "drain-timeout"
                self._remember(self.pods.delete(
                    namespace, action.pod, grace=TIMEOUT_DELETE_GRACE if timed_out else None),
                    namespace=namespace, name=action.pod)
                logger.info("%s/%s: deleted pod %s (%s, %d job(s) running) [%s]", namespace,
                            spec.name, action.pod, action.reason, action.running, trigger)
                if timed_out:
                    if action.running:
                        metrics.ROLLOUT_REAPED.labels(spec.name).inc(action.running)
                    posted.append(st.Event(
                        type="Warning", reason="DrainTimeout",
                        message=f"host {action.pod} still ran {action.running} job(s) after "
                                f"{spec.drain_timeout}s; pod deleted, its jobs are left to the "
                                "reaper"))
                elif action.reason == "failed":
                    posted.append(st.Event(
                        type="Warning", reason="PodFailed",
                        message=f"pod {action.pod} stopped; replacing it"
                                + (f" ({action.running} job(s) left to the reaper)"
                                   if action.running else "")))
                else:
                    posted.append(st.Event(type="Normal", reason="Deleted",
                                           message=f"host {action.pod} is idle; pod deleted"))
            elif isinstance(action, rollout.Create) and create:
                for _ in range(action.count):
                    pod = pools_spec.pod_name(spec)
                    try:
                        made = self.pods.create(namespace, pools_spec.pod_manifest(
                            spec, name=pod, namespace=namespace, owner_uid=uid))
                    except Exception as exc:  # any refusal: quota, admission, bad template
                        message = f"creating pod {pod} failed: {api_reason(exc)}"
                        logger.warning("%s/%s: %s [%s]", namespace, spec.name, message, trigger)
                        posted.append(st.Event(type="Warning", reason="FailedCreate",
                                               message=message))
                        failures.append(message)
                        break  # the rest would fail alike; the next pass retries
                    if made is not None and self.cache is not None:
                        self.cache.put(made)
                    created.append(pod)
                    logger.info("%s/%s: created pod %s (version %s) [%s]", namespace,
                                spec.name, pod, spec.code_version, trigger)
                    posted.append(st.Event(type="Normal", reason="Created",
                                           message=f"created pod {pod} "
                                                   f"(code version {spec.code_version})"))
        return Applied(events=posted, failures=failures, created=created)

    def _write(self, body: kopf.Body, patch: kopf.Patch, previous: dict[str, Any],
               decided: pool_status.StatusPlan, *, posted: list[st.Event] | None = None
               ) -> None:
        """The status delta into the patch; the pass's Events, then the status's (held
        until the status recording them is written, events.py says why)."""
        delta = st.status_patch(previous, decided.status, POOL_KEYS)
        for key, value in delta.items():
            patch.status[key] = value
        events.post(body, posted or [])
        events.post_with_status(body, decided.events)


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> PoolReconciler:
    cache = ObjectCache()
    reconciler = PoolReconciler(runtime, cache=cache)
    # No delete handler: the pods are owned by the pool and garbage-collected, and
    # each worker drains itself on SIGTERM (scale to 0 first for a drain-first removal).
    kind = handlers.register(registry, runtime, kind=KIND, resource=RESOURCE,
                             reconciler=reconciler, interval=pool_interval(), backoff=2,
                             change_id="pods")
    register_pod_watch(registry, runtime, kind, cache)
    return reconciler


def register_pod_watch(registry: kopf.OperatorRegistry, runtime: Runtime, pools: Kind,
                       cache: ObjectCache) -> None:
    """Watch the operator's worker pods: keep them in ``cache``, wake their pool on a change."""
    def nudge_owners(body: Mapping[str, Any]) -> None:
        for owner in owners_of(body):
            pools.nudge(owner)

    handlers.watch_pods(registry, runtime, name="pods", cache=cache, nudge=nudge_owners,
                        labels={pools_spec.POOL_LABEL: kopf.PRESENT})
