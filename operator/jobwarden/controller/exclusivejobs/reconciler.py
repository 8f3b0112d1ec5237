"""``ExclusiveJob`` -> one job row under its lease; the row and the lease -> ``.status``.

One job per resource uid and generation: the job's unique key is
``exclusivejob:<uid>:<generation>``, so a re-delivered event, a resumed
operator or two replicas racing all get the same row back (``duplicate``), and
the job id is recorded in ``status.jobId`` with the generation it belongs to.
Once a generation has a job id it is never enqueued again, even if the row was
purged meanwhile (a purge must not make a finished job run twice).

A spec change (a new generation) enqueues the new job and cancels the previous
generation's job if it is still pending (superseded); a running one finishes.

The job row carries ``lease_name`` (``key:<concurrencyKey>`` or
``job:<class>``), the lease the worker takes after claiming it. The operator
image does not contain application code, so the row is enqueued without
importing the class (``check=False``): unset queue / priority / timeout /
retries take the engine's defaults, not the class's.

``spec.ttlSecondsAfterFinished`` deletes the resource that long after its job
finished (succeeded, failed or skipped), as Kubernetes' TTL controller does
for a Job; the job row stays until the global purge, the run pods go with the
resource (owner references). The finish time is the job row's (the database
clock), compared with the operator's clock.

Deleting the resource cancels its job if it is still pending. The deletion is
observed (the watch's DELETED event), not blocked by a finalizer (handlers.py):
an ExclusiveJob deleted while no operator of its cluster runs leaves its job
as it is (a pending one then runs once; ``jobwarden jobs cancel`` stops it).
Job rows do not record the cluster that enqueued them, so no sweep can tell a
forgotten job from another cluster's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import kopf

from jobwarden import errors
from jobwarden.controller import handlers, specs
from jobwarden.controller.exclusivejobs import status as xst
from jobwarden.controller.kube import events
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.client import CustomObjects
from jobwarden.controller.podruns import reconciler as podruns
from jobwarden.controller.runtime import Runtime
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.leases import LeaseRecord
from jobwarden.structs.states import JobStatus

logger = logging.getLogger("jobwarden.controller.exclusive_jobs")

KIND = "ExclusiveJob"
RESOURCE = ("jobwarden.io", "v1alpha1", "exclusivejobs")


def current_job_id(status: dict[str, Any], generation: int | None) -> int | None:
    """The job id recorded for this generation, if any (pure)."""
    if status.get("observedGeneration") != generation:
        return None
    return _job_id(status)


def superseded_job_id(status: dict[str, Any], generation: int | None) -> int | None:
    """The previous generation's job id, when the status still names one (pure)."""
    if status.get("observedGeneration") in (None, generation):
        return None
    return _job_id(status)


def _job_id(status: dict[str, Any]) -> int | None:
    raw = status.get("jobId")
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


class ExclusiveJobReconciler:
    def __init__(self, runtime: Runtime, objects: CustomObjects | None = None) -> None:
        self.runtime = runtime
        #: The ExclusiveJob objects themselves (a TTL deletes them).
        self.objects = objects or CustomObjects(runtime.kube, RESOURCE)

    def enqueue(self, spec: specs.ExclusiveJobSpec, *, uid: str, generation: int,
                pod_run: str | None = None) -> int:
        job = spec.job
        prepared = self.runtime.client.spec(
            job.job_class, job.data, queue=job.queue, priority=job.priority,
            timeout=job.timeout_seconds, max_retries=job.max_retries,
            unique_key=specs.exclusive_unique_key(uid, generation), check=False)
        prepared = dataclasses.replace(
            prepared, lease_name=spec.lease_name, on_busy=spec.on_busy,
            lease_ttl_seconds=float(spec.lease_ttl_seconds) if spec.lease_ttl_seconds else None,
            pod_run=pod_run if spec.pod_run is not None else None)
        result = self.runtime.client.enqueue_specs([prepared])[0]
        return result.id

    def lease_of(self, job: JobRecord | None, spec: specs.ExclusiveJobSpec | None) -> str | None:
        return (job.lease_name if job is not None and job.lease_name else
                spec.lease_name if spec is not None else None)

    def read_lease(self, name: str | None) -> LeaseRecord | None:
        if name is None:
            return None
        rows = [r for r in self.runtime.db.leases.read(name) if r.slot == 0]
        return rows[0] if rows else None

    #: Events follow transitions at once: nothing to pass again after a change.
    settle_seconds = 0.0

    def fingerprints(self, bodies: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Hashable | None]:
        """By uid, the digest of each ExclusiveJob's job and lease rows (one query for
        all); None before its job is enqueued, or with a pod template or a TTL (claims,
        pods and the expiry are time-driven)."""
        found: dict[str, Hashable | None] = {}
        jobs: dict[int, str] = {}
        for body in bodies:
            meta = body.get("metadata") or {}
            uid = str(meta.get("uid"))
            spec = body.get("spec") or {}
            job_id = current_job_id(dict(body.get("status") or {}), meta.get("generation"))
            if job_id is None or spec.get("podTemplate") is not None \
                    or spec.get("ttlSecondsAfterFinished") is not None:
                found[uid] = None
                continue
            jobs[job_id] = uid
        if jobs:
            digests = {int(i): str(digest) for i, digest in self.runtime.db.rows(
                "job_status_fingerprints", {"ids": list(jobs)})}
            for job_id, uid in jobs.items():
                found[uid] = digests.get(job_id, "no job")
        return found

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        meta = body.get("metadata", {})
        generation = meta.get("generation")
        uid = str(meta.get("uid"))
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        previous: dict[str, Any] = dict(body.get("status") or {})
        now = dt.datetime.now(dt.UTC)
        try:
            spec = specs.parse_exclusive_job(body.get("spec"))
        except specs.SpecError as exc:
            conditions = xst.exclusive_conditions(error=str(exc), job=None, lease_name=None)
            desired = xst.exclusive_status(previous=previous, generation=generation, job=None,
                                           lease=None, conditions=conditions, now=now)
            self._write(body, patch, previous, desired)
            self.runtime.reconciled(KIND, "invalid")
            return "invalid"
        result = "unchanged"
        try:
            job_id = current_job_id(previous, generation)
            if job_id is None:
                job_id = self.enqueue(spec, uid=uid, generation=int(generation or 0),
                                      pod_run=specs.pod_run_name(KIND, namespace, name))
                result = "created"
                logger.info("%s/%s: job %d enqueued under lease %r [%s]",
                            meta.get("namespace"), meta.get("name"), job_id, spec.lease_name,
                            trigger)
                old = superseded_job_id(previous, generation)
                if old is not None and old != job_id:
                    self._supersede(body, old)
            job = self.runtime.db.jobs.get(job_id)
            lease = self.read_lease(self.lease_of(job, spec))
            pods = self.runtime.pod_runs.reconcile(
                KIND, meta, spec.pod_run, successful_history=spec.successful_history,
                failed_history=spec.failed_history) if self.runtime.pod_runs is not None \
                else None
        except errors.DatabaseUnavailable as exc:
            self.runtime.failed(KIND)
            self.runtime.health.database(False)
            raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        self.runtime.health.database(True)
        conditions = xst.exclusive_conditions(error=None, job=job,
                                              lease_name=self.lease_of(job, spec))
        desired = xst.exclusive_status(previous=previous, generation=generation, job=job,
                                       lease=lease, conditions=conditions, now=now)
        if job is None:
            desired["jobId"] = str(job_id)  # keep the id even when the row is gone
        if xst.expired(desired, spec.ttl_after_finished, now) and self._expire(body):
            self.runtime.reconciled(KIND, "expired")
            return "expired"
        self._write(body, patch, previous, desired)
        for key, value in podruns.status_delta(previous, pods or {}).items():
            patch.status[key] = value
        self.runtime.reconciled(KIND, result)
        return result

    def _expire(self, body: kopf.Body) -> bool:
        """Delete the resource whose TTL after finishing passed; False if it was gone."""
        meta = body.get("metadata", {})
        if meta.get("deletionTimestamp"):
            return True
        try:
            deleted = self.objects.delete(str(meta.get("namespace") or "default"),
                                          str(meta.get("name")), uid=str(meta.get("uid")))
        except Exception as exc:  # RBAC without delete: say so, keep mirroring the status
            logger.warning("%s/%s: ttlSecondsAfterFinished passed but deleting it failed: %s",
                           meta.get("namespace"), meta.get("name"), exc)
            return False
        if deleted:
            logger.info("%s/%s: deleted, ttlSecondsAfterFinished passed since its job "
                        "finished", meta.get("namespace"), meta.get("name"))
        return deleted

    def _supersede(self, body: kopf.Body, job_id: int) -> None:
        found = self.runtime.db.jobs.get(job_id)
        if found is not None and found.status is JobStatus.PENDING:
            self.runtime.db.jobs.cancel(job_id)
            events.post(body, [st.Event(type="Normal", reason="Superseded",
                                        message=f"job {job_id} of the previous generation "
                                                "cancelled (it had not started)")])

    def _write(self, body: kopf.Body, patch: kopf.Patch, previous: dict[str, Any],
               desired: dict[str, Any]) -> None:
        delta = st.status_patch(previous, desired, xst.EXCLUSIVE_KEYS)
        for key, value in delta.items():
            patch.status[key] = value
        posted = st.condition_events(previous.get("conditions"), desired.get("conditions", []))
        changed = xst.phase_event(previous.get("phase"), desired.get("phase"),
                                  job_id=desired.get("jobId"))
        if changed is not None:
            posted.append(changed)
        events.post_with_status(body, posted)

    def delete(self, *, body: kopf.Body) -> None:
        """Cancel the job if it has not started; a running or finished job is left as is."""
        meta = body.get("metadata", {})
        if self.runtime.pod_runs is not None:
            self.runtime.pod_runs.forget(str(meta.get("uid")))
        status: dict[str, Any] = dict(body.get("status") or {})
        generation = meta.get("generation")
        recorded = current_job_id(status, status.get("observedGeneration"))
        ids: list[int] = [] if recorded is None else [recorded]
        try:
            keys = [specs.exclusive_unique_key(str(meta.get("uid")), g)
                    for g in {int(generation or 0), int(generation or 0) - 1}
                    if g > 0]
            ids.extend(row[1] for row in self.runtime.db.rows("job_ids_by_unique_key",
                                                               {"unique_keys": keys}))
            cancelled = []
            for job_id in sorted(set(ids)):
                found = self.runtime.db.jobs.get(job_id)
                if found is not None and found.status is JobStatus.PENDING:
                    self.runtime.db.jobs.cancel(job_id)
                    cancelled.append(job_id)
        except errors.DatabaseUnavailable as exc:
            self.runtime.failed(KIND)
            raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        if cancelled:
            logger.info("%s/%s deleted: cancelled pending job(s) %s", meta.get("namespace"),
                        meta.get("name"), cancelled)
        self.runtime.reconciled(KIND, "deleted")


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> ExclusiveJobReconciler:
    reconciler = ExclusiveJobReconciler(runtime)
    handlers.register(registry, runtime, kind=KIND, resource=RESOURCE, reconciler=reconciler,
                      deleter=reconciler, indexed=False, fingerprinter=reconciler,
                      queued=True)
    return reconciler
