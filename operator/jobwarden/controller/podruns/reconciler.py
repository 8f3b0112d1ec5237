"""Runs in pods of their own, operator side: claim, create, watch, judge, replace, prune.

A ``JobSchedule`` or ``ExclusiveJob`` with ``spec.podTemplate`` marks its job rows
with ``pod_run = "<Kind>/<namespace>/<name>"``; workers never claim those. This
module is the operator's half (``jobwarden run-job`` in the pod is the other,
:mod:`jobwarden.podruns` the database half). It rides on the operator's one
mechanism for time-driven work (handlers.py, resyncing.py): each resource's
reconcile pass -- on a change, every status interval, and at once when one of
its pods changed (the pod watch nudges it) -- calls :meth:`PodRuns.reconcile`,
which does, for that resource:

* **claim and create.** Claim the resource's due rows, fenced like any
  worker's claim, and create one pod per claim (jobwarden.controller.podruns.pods).
  No database lease and no leader: the claim is ``FOR UPDATE SKIP LOCKED``, so
  several operators (replicas, clusters) may reconcile the same resource and
  each row still goes to exactly one of them. A claim whose lease is busy was
  deferred (or skipped, or failed) by the claim itself and never becomes a pod.
  The pod's name is derived from the claim, so a create retried after a lost
  reply finds the pod (409) instead of making a second.
* **re-create.** An operator that dies between its claim and the create (or a
  pod deleted before it started, while no operator watched) leaves a claim
  without a pod. Every pass looks for such claims -- held by this cluster's
  claimant, not started (run-job never began), not cancelled, start deadline
  not passed, and no pod -- and creates the pod for them with the claim's own
  id and tokens, under the same name: a peer that got there first makes it a
  409, "exists". The pod's absence is confirmed by a GET of that name before
  the row is read again and the pod created, so a pod that started in between
  is never doubled; run-job starts only under a claim that is still
  processing (its start is fenced), so a job never runs twice. A claim past its start
  deadline gets no pod: the reaper ends it (never started: back to pending).
* **judge.** The pods come from the pod watch's cache (label
  ``jobwarden.io/pod-run``; a LIST corrects it now and then). Each one goes
  through :func:`jobwarden.controller.podruns.fates.judge`; a pod that ended without
  its job recording an outcome, or never started by the start deadline (it is
  deleted then, so it cannot start late), ends the claim with ``fail_pod_run``
  and the cause -- the dead-worker rules, fenced, so a job that did record its
  outcome is left alone -- plus a Warning Event and a count by cause. A pod's
  DELETED event is judged at once by the watch.
* **Replace.** A running row with ``cancel_requested`` gets its pod deleted
  with the pod's grace period (``run-job`` cancels cooperatively and records
  ``cancelled``), and once that grace is over, deleted with none.
* **history and status.** Finished pods beyond ``successfulJobsHistoryLimit`` /
  ``failedJobsHistoryLimit`` are deleted (oldest first); ``status.activePods``
  and ``status.lastPod`` name the pods.

Only "already judged / already timed" per pod uid lives in memory; a restarted
operator judges a finished pod again, and the fenced call makes that harmless.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import kopf

from jobwarden import errors, podruns
from jobwarden.controller import handlers, specs
from jobwarden.controller.kube import events
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.caching import ObjectCache
from jobwarden.controller.kube.client import api_reason, status_of
from jobwarden.controller.kube.pods import KubePods
from jobwarden.controller.kube.podstate import epoch
from jobwarden.controller.podruns import fates
from jobwarden.controller.podruns import pods as runpods
from jobwarden.observability import metrics
from jobwarden.structs.podruns import PodFailureCause, PodRunClaim, RunningPodRun

if TYPE_CHECKING:
    from jobwarden.controller.runtime import Runtime
    from jobwarden.db.database import Database

logger = logging.getLogger("jobwarden.controller.podruns")

KINDS = ("JobSchedule", "ExclusiveJob")
#: Claims per resource and pass (each becomes a pod create call).
CLAIM_LIMIT = 10
#: The claim's reap deadline is the start deadline plus this: the operator judges a pod
#: that never started (and names the cause) before the reaper's generic rule applies.
REAP_MARGIN = 30.0
#: A pod still present this long after the end of its deletion grace is deleted with none.
FORCE_AFTER = 10.0
#: One LIST of a resource's pods this often corrects the watch-fed cache (seconds).
POD_LIST_SECONDS = 300.0
#: Causes worth an Event even when the job recorded its own outcome first (on SIGTERM).
NOTED_WHEN_RECORDED = ("evicted", "node_lost")
#: ``status.activePods`` lists at most this many.
ACTIVE_SHOWN = 10
FINISHED = ("Succeeded", "Failed")
STATUS_KEYS = ("activePods", "lastPod")


def claimant_of(cluster: str) -> str:
    """Who claims pod runs for this cluster's operators (stable across restarts)."""
    return f"pod-runs:{cluster}"


def claimed_at(pod: Mapping[str, Any]) -> float | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        runpods.CLAIMED_AT_ANNOTATION)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def claim_token_of(pod: Mapping[str, Any]) -> str | None:
    """The claim token the operator handed the pod (its job container's environment)."""
    container = runpods.job_container(pod.get("spec") or {})
    for entry in (container or {}).get("env") or []:
        if entry.get("name") == "JOBWARDEN_CLAIM_TOKEN":
            return str(entry.get("value") or "") or None
    return None


def _created(pod: Mapping[str, Any]) -> tuple[float, str]:
    meta = pod.get("metadata") or {}
    return epoch(meta.get("creationTimestamp")) or 0.0, str(meta.get("name", ""))


def history_victims(pods: Sequence[Mapping[str, Any]], *, successful: int | None,
                    failed: int | None) -> list[str]:
    """Finished pods beyond the history limits, oldest first (pure; None keeps all)."""
    victims: list[str] = []
    for phase, keep in (("Succeeded", successful), ("Failed", failed)):
        if keep is None:
            continue
        done = sorted((p for p in pods if (p.get("status") or {}).get("phase") == phase
                       and not (p.get("metadata") or {}).get("deletionTimestamp")),
                      key=_created, reverse=True)
        victims.extend(str(p["metadata"]["name"]) for p in reversed(done[keep:]))
    return victims


def pods_status(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``activePods`` and ``lastPod`` of one resource's pods (pure)."""
    ordered = sorted(pods, key=_created)
    active = [str(p["metadata"]["name"]) for p in ordered
              if (p.get("status") or {}).get("phase") not in FINISHED
              and not (p.get("metadata") or {}).get("deletionTimestamp")]
    return {"activePods": active[-ACTIVE_SHOWN:],
            "lastPod": str(ordered[-1]["metadata"]["name"]) if ordered else None}


def status_delta(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The status keys of ``desired`` that differ from ``previous`` (None deletes one)."""
    return {key: desired.get(key) for key in STATUS_KEYS
            if key in desired and previous.get(key) != desired.get(key)}


@dataclasses.dataclass
class PassReport:
    """What one resource's pass did (tests and logs read it)."""

    claimed: int = 0
    created: int = 0
    #: Pods created for claims that had none (an operator died before creating them).
    recreated: int = 0
    judged: int = 0
    stopped: int = 0
    pruned: int = 0


class PodRuns:
    """The pod-run half of the JobSchedule / ExclusiveJob reconcilers, and the pod watch."""

    def __init__(self, db: Database, *, cluster: str, pods: KubePods,
                 cache: ObjectCache | None = None) -> None:
        self.db = db
        self.pods = pods
        #: The pod watch's cache; None: every pass LISTs (tests of one pass).
        self.cache = cache
        self.claimant = claimant_of(cluster)
        self._lock = threading.Lock()
        #: Resource uid -> the resource's pod-run spec, as last reconciled.
        self._specs: dict[str, specs.PodRunSpec] = {}
        self._listed: dict[str, float] = {}
        #: Pod uids whose end was handed to fail_pod_run (or found fenced).
        self._judged: set[str] = set()
        #: (job id, attempt) of those pods: a claim whose pod ended is never given a new one.
        self._ended: set[tuple[int, int]] = set()
        #: Pod uids whose start latency was observed.
        self._timed: set[str] = set()
        for kind in KINDS:
            metrics.prime_pod_runs(kind)

    # -- one resource's pass ----------------------------------------------------------------

    def reconcile(self, kind: str, meta: Mapping[str, Any], spec: specs.PodRunSpec | None, *,
                  successful_history: int | None = None,
                  failed_history: int | None = None) -> dict[str, Any] | None:
        """Claim, create, judge, stop, prune for one resource; its pod status fields.

        None when the resource has no pod template (nothing to show) or the pass
        could not finish (logged; the next pass retries, and the status keeps
        what it showed).
        """
        owner = runpods.Owner(kind=kind, namespace=str(meta.get("namespace") or "default"),
                              name=str(meta.get("name")), uid=str(meta.get("uid")))
        with self._lock:
            if spec is None:
                self._specs.pop(owner.uid, None)
                return None
            self._specs[owner.uid] = spec
        metrics.prime_pod_runs(kind, f"{owner.namespace}/{owner.name}")
        report = PassReport()
        try:
            fresh = self._claim(owner, spec, report)
            pods = self.observe(owner)
            now = time.time()
            for pod in pods:
                report.judged += self._judge(pod, owner=owner, now=now, deleted=False)
            running = podruns.running_pod_runs(self.db, [owner.pod_run])
            self._recreate(owner, spec, running, pods, report, now=now, skip=fresh)
            self._stop(owner, running, pods, report, now=now)
            gone = set(history_victims(pods, successful=successful_history,
                                       failed=failed_history))
            for name in sorted(gone):
                self.pods.delete(owner.namespace, name)
                report.pruned += 1
                logger.info("%s: pod %s deleted (history limit)", owner.pod_run, name)
        except errors.DatabaseUnavailable:
            raise
        except Exception:
            logger.exception("%s: the pod-run pass failed (the next pass retries)",
                             owner.pod_run)
            return None
        if report.created or report.recreated or report.judged or report.stopped \
                or report.pruned:
            logger.info("%s: %s", owner.pod_run, report)
        return pods_status([p for p in self.observe(owner)
                            if p["metadata"].get("name") not in gone])

    def forget(self, uid: str) -> None:
        with self._lock:
            self._specs.pop(uid, None)
            self._listed.pop(uid, None)

    def observe(self, owner: runpods.Owner) -> list[dict[str, Any]]:
        """The resource's pods: from the watch's cache, corrected by a LIST now and then."""
        if self.cache is None:
            return self._list(owner)
        now = time.monotonic()
        if self._listed.get(owner.uid, -POD_LIST_SECONDS) + POD_LIST_SECONDS <= now:
            self.cache.replace_owned(owner.uid, self._list(owner))
            self._listed[owner.uid] = now
        return [p for p in self.cache.owned_by(owner.uid)
                if (p.get("metadata") or {}).get("namespace", owner.namespace)
                == owner.namespace]

    def _list(self, owner: runpods.Owner) -> list[dict[str, Any]]:
        return self.pods.list(owner.namespace, selector=f"{runpods.POD_RUN_LABEL}={owner.uid}")

    def _claim(self, owner: runpods.Owner, spec: specs.PodRunSpec,
               report: PassReport) -> set[int]:
        """Claim due runs and create their pods; the job ids claimed in this pass."""
        batch = podruns.claim_pod_runs(
            self.db, pod_runs=[owner.pod_run], claimant=self.claimant,
            start_deadline=spec.start_deadline_seconds + REAP_MARGIN, limit=CLAIM_LIMIT)
        for claim in batch.claims:
            report.claimed += 1
            logger.debug("%s: claimed job %d attempt %d", owner.pod_run, claim.job_id,
                         claim.attempt)
            if self._create(owner, spec, run_of_claim(claim), claimed_at=time.time()):
                report.created += 1
        return {claim.job_id for claim in batch.claims}

    def _recreate(self, owner: runpods.Owner, spec: specs.PodRunSpec,
                  running: Sequence[RunningPodRun], pods: Sequence[Mapping[str, Any]],
                  report: PassReport, *, now: float, skip: set[int]) -> None:
        """Create the pod of every claim of this cluster that has none (see the docstring)."""
        with self._lock:
            have = {runpods.run_of(p) for p in pods} | set(self._ended)
        for row in orphaned_claims(running, have=have, claimant=self.claimant, now=now,
                                   deadline=spec.start_deadline_seconds, skip=skip):
            run = run_of_row(row)
            name = runpods.pod_name(owner, run)
            found = self.pods.get(owner.namespace, name)
            if found is not None:  # the watch had not shown it yet: nothing to do
                if self.cache is not None:
                    self.cache.put(found)
                continue
            # Read the row again now that the pod is known absent: a claim that started,
            # ended or changed hands meanwhile is not this pod's any more.
            again = next((r for r in podruns.running_pod_runs(self.db, [owner.pod_run])
                          if r.job_id == row.job_id), None)
            if again is None or again.claim_token != row.claim_token or again.started \
                    or again.cancel_requested or again.claimed_by != self.claimant:
                continue
            claimed = row.claimed_at.timestamp() if row.claimed_at is not None else now
            logger.warning("%s: job %d attempt %d is claimed (%s) but has no pod: "
                           "re-creating pod %s", owner.pod_run, row.job_id, row.attempt,
                           self.claimant, name)
            if self._create(owner, spec, run, claimed_at=claimed, recreated=True):
                report.recreated += 1

    def _create(self, owner: runpods.Owner, spec: specs.PodRunSpec, run: runpods.Run, *,
                claimed_at: float, recreated: bool = False) -> bool:
        name = runpods.pod_name(owner, run)
        try:
            manifest = runpods.pod_manifest(spec, owner=owner, run=run, claimed_at=claimed_at)
            created = self.pods.create(owner.namespace, manifest)
        except Exception as exc:
            if status_of(exc) == 409:  # a pod of that name exists: the same claim's
                return False
            if _transient(exc):
                # The claim stays; a later pass creates its pod (_recreate) while its start
                # deadline lasts, and a late success of this call makes that a 409.
                logger.warning("%s: creating pod %s for job %d failed: %s", owner.pod_run,
                               name, run.job_id, api_reason(exc))
                return False
            self._fail(owner, run.job_id, run.claim_token, "error",
                       f"creating pod {name} failed: {api_reason(exc)}", pod=name)
            return False
        if self.cache is not None:
            self.cache.put(created)
        metrics.POD_RUNS.labels(owner.kind, f"{owner.namespace}/{owner.name}").inc()
        logger.info("%s: job %d attempt %d -> pod %s%s", owner.pod_run, run.job_id,
                    run.attempt, name, " (re-created)" if recreated else "")
        self._event(owner, "Normal", "PodRecreated" if recreated else "PodCreated",
                    f"pod {name} runs job {run.job_id} (attempt {run.attempt})"
                    + ("; re-created: the claim had no pod (its operator stopped before "
                       "creating it, or it was deleted before it started)" if recreated
                       else ""))
        return True

    # -- judging ----------------------------------------------------------------------------

    def judge_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """A watch event of a run pod: judged at once (errors logged, never raised)."""
        owner = owner_of(pod)
        if owner is None:
            return
        try:
            self._judge(pod, owner=owner, now=time.time(), deleted=event_type == "DELETED")
        except Exception:
            logger.exception("pod %s: judging its watch event failed (the next pass retries)",
                             (pod.get("metadata") or {}).get("name"))

    def _judge(self, pod: Mapping[str, Any], *, owner: runpods.Owner, now: float,
               deleted: bool) -> int:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        self._time_start(pod, owner.kind, uid)
        run = runpods.run_of(pod)
        token = claim_token_of(pod)
        with self._lock:
            if uid in self._judged or run is None or token is None:
                return 0
            spec = self._specs.get(owner.uid)
        stamp = claimed_at(pod)
        deadline = float(spec.start_deadline_seconds if spec is not None
                         else specs.DEFAULT_START_DEADLINE)
        verdict = fates.judge(pod, age=now - stamp if stamp is not None else 0.0,
                                 deadline=deadline, deleted=deleted)
        if verdict.cause is None:
            return 0
        with self._lock:
            if uid in self._judged:
                return 0
            self._judged.add(uid)
            self._ended.add(run)
        name = str(meta.get("name"))
        if verdict.delete and not deleted:
            # The cause first, then the delete: the deletion's own event then names it.
            self._annotate(owner, name, {runpods.STOP_REASON_ANNOTATION: str(verdict.cause)})
            self.pods.delete(owner.namespace, name)
        self._fail(owner, run[0], token, verdict.cause, verdict.message, pod=name)
        return 1

    def _time_start(self, pod: Mapping[str, Any], kind: str, uid: str) -> None:
        if not fates.started(pod):
            return
        with self._lock:
            if uid in self._timed:
                return
            self._timed.add(uid)
        stamp = claimed_at(pod)
        if stamp is None:
            return
        began = fates.started_at(pod)
        at = began.timestamp() if began is not None else time.time()
        metrics.POD_RUN_START.labels(kind).observe(max(0.0, at - stamp))

    def _fail(self, owner: runpods.Owner, job_id: int, token: str, cause: PodFailureCause,
              message: str, *, pod: str) -> None:
        after = podruns.fail_pod_run(self.db, job_id, token, cause=cause,
                                     message=f"{pod}: {message}")
        if after is None:
            logger.debug("%s: pod %s ended (%s) after job %d recorded its outcome",
                        owner.pod_run, pod, cause, job_id)
            if cause in NOTED_WHEN_RECORDED:
                # An eviction's SIGTERM let run-job record the run's end itself (its error
                # says SIGTERM); the Event still names why the pod went.
                self._event(owner, "Warning", fates.EVENT_REASONS[cause],
                            f"pod {pod}: {message}; job {job_id} had recorded its outcome")
            return
        metrics.POD_RUN_FAILURES.labels(owner.kind, cause).inc()
        logger.warning("%s: pod %s: %s: %s; job %d is now %s", owner.pod_run, pod, cause,
                       message, job_id, after)
        self._event(owner, "Warning", fates.EVENT_REASONS[cause],
                    f"pod {pod}: {message}; job {job_id} is now {after}")

    def _annotate(self, owner: runpods.Owner, name: str, annotations: dict[str, str]) -> None:
        """Annotate a run pod; one already gone is no error (its deletion is the point)."""
        try:
            self.pods.annotate(owner.namespace, name, annotations)
        except Exception as exc:
            if status_of(exc) != 404:
                raise

    def _event(self, owner: runpods.Owner, type: Literal["Normal", "Warning"], reason: str,
               message: str) -> None:
        """A core/v1 Event on the resource (the pod watch runs outside kopf's handlers)."""
        involved = events.Involved(api_version=runpods.API_VERSION, kind=owner.kind,
                                   namespace=owner.namespace, name=owner.name, uid=owner.uid)
        try:
            events.post_direct(self.pods.core(), involved,
                               st.Event(type=type, reason=reason, message=message))
        except Exception as exc:
            logger.warning("%s: event %s not posted: %s", owner.pod_run, reason, exc)

    # -- Replace ----------------------------------------------------------------------------

    def _stop(self, owner: runpods.Owner, running: Sequence[RunningPodRun],
              pods: list[dict[str, Any]], report: PassReport, *, now: float) -> None:
        """Delete the pod of every running row a Replace (or a cancel) asked to stop."""
        by_run = {runpods.run_of(p): p for p in pods}
        for row in running:
            pod = by_run.get((row.job_id, row.attempt))
            if not row.cancel_requested or pod is None:
                continue
            meta = pod["metadata"]
            name = str(meta["name"])
            ending = epoch(meta.get("deletionTimestamp"))
            if ending is None:
                self._annotate(owner, name, {runpods.STOP_REASON_ANNOTATION: "replaced"})
                self.pods.delete(owner.namespace, name)
                report.stopped += 1
                self._event(owner, "Normal", "StoppingPod",
                            f"job {row.job_id} was cancelled: stopping its pod {name} "
                            "(graceful, then forced)")
            elif now > ending + FORCE_AFTER:
                self.pods.delete(owner.namespace, name, grace=0)
                report.stopped += 1
                self._event(owner, "Warning", "PodForceDeleted",
                            f"pod {name} outlived its grace period: deleted with none")


def owner_of(pod: Mapping[str, Any]) -> runpods.Owner | None:
    """The JobSchedule / ExclusiveJob a run pod belongs to (its controller reference)."""
    meta = pod.get("metadata") or {}
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") in KINDS), None)
    if ref is None:
        return None
    return runpods.Owner(kind=str(ref["kind"]), namespace=str(meta.get("namespace")),
                         name=str(ref.get("name")), uid=str(ref.get("uid")))


def orphaned_claims(running: Sequence[RunningPodRun], *, have: set[tuple[int, int] | None],
                    claimant: str, now: float, deadline: float,
                    skip: set[int]) -> list[RunningPodRun]:
    """The claims whose pod must be created again (pure).

    Held by ``claimant`` (this cluster: another cluster's claim is its operator's), not
    started (run-job never began: nothing ran under it), not asked to stop, within the
    start deadline (``deadline`` seconds from the claim; a later one is the reaper's),
    not claimed in this very pass (``skip``: its create was just tried), and no pod of
    that job and attempt in ``have``.
    """
    found: list[RunningPodRun] = []
    for row in running:
        if row.claimed_by != claimant or row.started or row.cancel_requested \
                or row.job_id in skip or (row.job_id, row.attempt) in have:
            continue
        if row.claimed_at is None or row.claimed_at.timestamp() + deadline <= now:
            continue
        found.append(row)
    return found


def run_of_row(row: RunningPodRun) -> runpods.Run:
    """The pod's claim from a running row: the same id, tokens and attempt as at claim."""
    return runpods.Run(job_id=row.job_id, attempt=row.attempt, claim_token=str(row.claim_token),
                       slot=row.slot, lease_token=row.lease_token)


def run_of_claim(claim: PodRunClaim) -> runpods.Run:
    return runpods.Run(job_id=claim.job_id, attempt=claim.attempt,
                       claim_token=str(claim.claim_token), slot=claim.slot,
                       lease_token=claim.lease_token)


def _transient(exc: Exception) -> bool:
    """An API failure worth retrying (server side, throttled, unreachable)?"""
    if isinstance(exc, specs.SpecError):
        return False
    status = status_of(exc)
    return status is None or status >= 500 or status == 429


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
    """The pod watch of run pods: cached, their resource nudged, a deletion judged at once."""
    pod_runs = runtime.pod_runs
    if pod_runs is None or pod_runs.cache is None:
        return

    def nudge_owner(body: Mapping[str, Any]) -> None:
        owner = owner_of(body)
        for kind in runtime.kinds:
            if owner is not None and kind.name == owner.kind:
                kind.nudge(owner.uid)

    handlers.watch_pods(registry, runtime, name="run-pods", cache=pod_runs.cache,
                        nudge=nudge_owner, labels={runpods.POD_RUN_LABEL: kopf.PRESENT},
                        deleted=lambda body: pod_runs.judge_event("DELETED", body))
