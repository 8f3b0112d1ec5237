"""``JobSchedule`` -> one schedule row; the row (and its last job) -> ``.status``.

Level-triggered on purpose: the change queue's passes (controller/changes.py:
the watch saw the object new or changed) and the resync loop's all call the
same :meth:`ScheduleReconciler.reconcile`, which reads the spec and the row as
they are *now* and converges them. A missed watch event,
an operator restart, a row deleted by hand or by another cluster: the next pass
repairs it, with no per-event bookkeeping to get wrong.

Rules (decided by the pure functions in :mod:`jobwarden.controller.kube.status`):

* An invalid spec (cron syntax, time zone, catch-up...) sets ``Ready=False``
  with the reason and posts a Warning Event; the database is not touched (a
  previously valid row keeps running unchanged).
* The row is named ``<namespace>/<name>``; the same resource in several
  clusters is ONE schedule. Its ``source`` names the cluster that wrote it. A
  cluster whose spec differs from a row another cluster wrote reports
  ``Conflicting=True`` and leaves the row alone (first writer wins).
* Deletion is observed, not blocked (no finalizer, see handlers.py): the
  watch's DELETED event deletes the row when this cluster wrote it (another
  cluster's row stays; it re-creates it anyway), and the resync loop's sweep
  deletes the rows of this cluster whose resource is gone, confirmed by a GET,
  in the namespaces this operator watches (a deletion while no operator ran).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

import kopf

from jobwarden import errors
from jobwarden.controller import handlers, specs
from jobwarden.controller.jobschedules import runevents
from jobwarden.controller.jobschedules import status as sst
from jobwarden.controller.kube import events, secretchecks
from jobwarden.controller.kube import status as st
from jobwarden.controller.podruns import reconciler as podruns
from jobwarden.controller.runtime import Runtime
from jobwarden.structs.schedules import OWNER_ABSENT, ScheduleDefinition, ScheduleRecord

logger = logging.getLogger("jobwarden.controller.schedules")

KIND = "JobSchedule"
RESOURCE = ("jobwarden.io", "v1alpha1", "jobschedules")
#: Set it (to any new value, e.g. a timestamp) to enqueue one run now; each distinct
#: value enqueues at most one job (``status.runNow.request`` remembers the last).
RUN_NOW_ANNOTATION = "jobwarden.io/run-now"
#: ``status.active`` lists at most this many of the schedule's pending/running jobs.
ACTIVE_SHOWN = 10


def row_matches(row: ScheduleRecord, validated: ScheduleDefinition) -> bool:
    """Does the stored row already hold ``validated``? By the store's own ``spec_hash``.

    The hash covers what decides the jobs and their timing (not who wrote it, and
    not a manual suspension), exactly the store's notion of "the same schedule".
    """
    return validated.spec_hash == row.spec_hash


def view_of(row: ScheduleRecord) -> sst.ScheduleView:
    return sst.ScheduleView(
        last_slot=row.last_slot, next_slot=row.next_slot, suspended=bool(row.suspended),
        enqueued=int(row.enqueued_count), skipped=int(row.skipped_count),
        missed=int(row.missed_count), replaced=int(row.replaced_count),
        dropped=int(row.dropped_count), deferred=int(row.deferred_count),
        last_job_id=row.last_job_id,
        last_job_status=row.last_job_status,
        last_job_finished_at=row.last_job_finished_at,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """What a batch read and wrote for one schedule before its pass (:meth:`batch`):
    the pass starts from it instead of its own statements, when its definition is
    still the one prepared (``spec_hash``)."""

    spec_hash: str
    #: The row as read, or as this batch created it (``created``).
    row: ScheduleRecord
    created: bool
    #: The history limits recorded, and the finished jobs they deleted.
    limits: tuple[int | None, int | None]
    trimmed: int
    #: The schedule's active jobs, read after the trim.
    active: list[tuple[int, str]]
    #: The jobs read for the run Events (``id >= floor``), when they were read.
    outcomes: tuple[int, list[runevents.Outcome]] | None


class ScheduleReconciler:
    def __init__(self, runtime: Runtime, secrets: secretchecks.SecretChecks | None = None
                 ) -> None:
        self.runtime = runtime
        self.secrets = secrets or secretchecks.SecretChecks(runtime.pods)
        self.run_events = runevents.RunEvents()
        #: This thread's batch (:meth:`batch`): by row name, what each pass starts from.
        self._batch = threading.local()

    @contextlib.contextmanager
    def batch(self, bodies: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Hashable]]:
        """Around the change queue's passes of ``bodies`` (in this thread): what each
        pass would read and write with statements of its own, read and written with a
        bounded number of them whatever their number (docs/benchmarks.md, "Scale"):

        * the rows, read by name with one statement;
        * the new ones (a valid spec, no row) created together, as one-by-one passes
          create them (each starts from now, this cluster their source); a name another
          writer created meanwhile is left to its pass (which reads it and decides);
          their digests, which the block yields by uid: what each pass starts from;
        * the history limits recorded and the finished jobs beyond them deleted (one
          statement, and one per status group only where a schedule has a limit);
        * the active jobs, and the jobs the run Events read (one statement each).

        An invalid spec, a changed or conflicting row, a row suspended while its owner
        was away are decided by their passes as before, from the row read here; a
        pass that runs a run-now reads its active jobs itself (the run is one of them).
        """
        store = self.runtime.client.schedules
        wanted: dict[str, tuple[str, ScheduleDefinition, specs.JobScheduleSpec]] = {}
        #: By row name, the spec as parsed here: its pass parses it only if it changed.
        parsed: dict[str, tuple[Any, specs.JobScheduleSpec]] = {}
        for body in bodies:
            meta = body.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue  # not passed either
            namespace = str(meta.get("namespace") or "default")
            row_name = specs.schedule_row_name(namespace, str(meta.get("name")))
            try:
                desired = self._parse(body.get("spec"), namespace, str(meta.get("name")))
            except specs.SpecError:
                continue  # its pass reports it; the database is not touched
            assert desired.validated is not None
            wanted[row_name] = (str(meta.get("uid")), desired.validated, desired)
            # The cache's own spec (bodies are copied into it, never changed in it).
            parsed[row_name] = (body.get("spec"), desired)
        prepared: dict[str, Prepared] = {}
        #: By uid: the digest of a row this batch created, as its pass starts from it.
        started: dict[str, Hashable] = {}
        if wanted:
            rows = store.get_many(list(wanted))
            created = store.create_many([validated for name, (_, validated, _) in
                                         wanted.items() if name not in rows])
            if created:
                # The new rows' digests, then the rows the passes start from, read again
                # after them: the digest a pass records as its start is never newer than
                # what its status shows (a change in between costs the resync loop a
                # pass, never a miss); the loop then does not pass every new schedule
                # once more for the digest its own create changed (docs/benchmarks.md).
                for name, digest in self.runtime.db.rows("schedule_status_fingerprints",
                                                          {"names": sorted(created)}):
                    started[wanted[str(name)][0]] = str(digest)
                created = store.get_many(sorted(created))
            rows.update(created)
            limits = {name: (wanted[name][2].successful_history,
                             wanted[name][2].failed_history) for name in rows}
            trimmed = store.trim_history_many(limits)
            active = store.active_jobs_many(list(rows), limit=ACTIVE_SHOWN)
            floors = {name: self.run_events.floor(wanted[name][0],
                                                  last_job_id=row.last_job_id)
                      for name, row in rows.items()
                      if self.run_events.needs_read(wanted[name][0],
                                                    enqueued=int(row.enqueued_count),
                                                    active=bool(active[name]))}
            outcomes = store.job_outcomes_many(floors) if floors else {}
            for name, row in rows.items():
                read = outcomes.get(name)
                prepared[name] = Prepared(
                    spec_hash=wanted[name][1].spec_hash, row=row, created=name in created,
                    limits=limits[name], trimmed=trimmed.get(name, 0), active=active[name],
                    outcomes=None if read is None else (floors[name], [
                        runevents.Outcome(id=i, status=status, unique_key=key, error=error)
                        for i, status, key, error in read]))
        self._batch.prepared, self._batch.parsed = prepared, parsed
        self._batch.told = told = collections.Counter[tuple[str, str]]()
        try:
            yield started
        finally:
            self._batch.prepared, self._batch.parsed, self._batch.told = {}, {}, None
            if told:
                # One line for the batch, not one per schedule: at a start with
                # thousands of them, the passer threads queued behind one another's
                # line for the logging handler's lock (docs/benchmarks.md).
                logger.info("a batch of %d schedule(s): %s", len(bodies), ", ".join(
                    f"{count} {action} [{trigger}]"
                    for (action, trigger), count in sorted(told.items())))

    def _parse(self, spec: Any, namespace: str, name: str) -> specs.JobScheduleSpec:
        return specs.parse_job_schedule(
            spec, row_name=specs.schedule_row_name(namespace, name),
            source=self.runtime.source, pod_run_ref=specs.pod_run_name(KIND, namespace, name))

    def _parsed(self, row_name: str, spec: Any) -> specs.JobScheduleSpec | None:
        """This thread's batch's parse of the schedule's spec, taken (once), if the
        spec is still the one it parsed."""
        found = getattr(self._batch, "parsed", {}).pop(row_name, None)
        return found[1] if found is not None and found[0] == spec else None

    def _told(self, action: str, row_name: str, desired: specs.JobScheduleSpec,
              trigger: str) -> None:
        """A row created or updated: one INFO line per schedule, or per batch inside one
        (each schedule's at DEBUG)."""
        told: collections.Counter[tuple[str, str]] | None = getattr(self._batch, "told",
                                                                   None)
        line = "%s schedule %s (%s) [%s]"
        if told is None:
            logger.info(line, action, row_name, desired.describe(), trigger)
            return
        told[(action, trigger)] += 1
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(line, action, row_name, desired.describe(), trigger)

    def _prepared(self, row_name: str, validated: ScheduleDefinition) -> Prepared | None:
        """This thread's batch's preparation of the schedule, taken (once), if it was
        prepared for this definition."""
        found: Prepared | None = getattr(self._batch, "prepared", {}).pop(row_name, None)
        return found if found is not None and found.spec_hash == validated.spec_hash \
            else None

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        """One convergence pass; returns the result label it counted."""
        meta = body.get("metadata", {})
        namespace = str(meta.get("namespace") or "default")
        row_name = specs.schedule_row_name(namespace, str(meta.get("name")))
        generation = meta.get("generation")
        previous: dict[str, Any] = dict(body.get("status") or {})
        now = dt.datetime.now(dt.UTC)
        try:
            desired = self._parsed(row_name, body.get("spec")) \
                or self._parse(body.get("spec"), namespace, str(meta.get("name")))
        except specs.SpecError as exc:
            conditions = sst.schedule_conditions(
                action=None, error=str(exc), suspended=None, row_name=row_name,
                row_source=None, our_source=self.runtime.source)
            desired_status = sst.schedule_status(previous=previous, generation=generation,
                                                 view=None, conditions=conditions, now=now)
            self._write(body, patch, previous, desired_status, action=None, row_name=row_name)
            self.runtime.reconciled(KIND, "invalid")
            return "invalid"
        store = self.runtime.client.schedules
        # Validated once, by parse_job_schedule: the hash to compare and the definition
        # to store come from that one call (the store applies it without validating again).
        validated = desired.validated
        assert validated is not None
        prepared = self._prepared(row_name, validated)
        try:
            row = prepared.row if prepared is not None else store.get(row_name)
            action = sst.decide_schedule(
                row_exists=row is not None, row_source=row.source if row is not None else None,
                row_matches=row is not None and row_matches(row, validated),
                our_source=self.runtime.source)
            if prepared is not None and prepared.created:
                action = "create"  # by the batch, from this definition
            if action in ("create", "update"):
                if prepared is None or not prepared.created:
                    row = store.apply(validated)
                self._told("created" if action == "create" else "updated", row_name,
                           desired, trigger)
            elif action == "none" and row is not None and row.suspended_by == OWNER_ABSENT \
                    and store.resume_owned(row_name, source=self.runtime.source):
                # Suspended by runners while its owner was away; this resource exists
                # and says the same: resumed, and this cluster answers for it now.
                logger.info("schedule %s resumed: suspended while %s was absent [%s]",
                            row_name, row.source, trigger)
                row = store.get(row_name)
        except errors.DatabaseUnavailable as exc:
            self.runtime.failed(KIND)
            self.runtime.health.database(False)
            raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        self.runtime.health.database(True)
        pods: dict[str, Any] | None = None
        if self.runtime.pod_runs is not None:
            try:
                pods = self.runtime.pod_runs.reconcile(
                    KIND, meta, desired.pod_run, successful_history=desired.successful_history,
                    failed_history=desired.failed_history)
            except errors.DatabaseUnavailable as exc:
                self.runtime.failed(KIND)
                raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        conditions = sst.schedule_conditions(
            action=action, error=None,
            suspended=bool(row.suspended) if row is not None else desired.suspended,
            row_name=row_name, row_source=row.source if row is not None else None,
            our_source=self.runtime.source,
            problem=self._problem(namespace, desired, row))
        desired_status = sst.schedule_status(
            previous=previous, generation=generation,
            view=view_of(row) if row is not None else None, conditions=conditions, now=now)
        told: list[st.Event] = []  # recorded in the status (run-now)
        ran: list[st.Event] = []  # the runs' own (runevents.py keeps what it told)
        if row is not None:
            try:
                told = self._cronjob_parity(body, row, desired, desired_status,
                                            previous=previous, row_name=row_name, now=now,
                                            prepared=prepared)
                ran = self._run_events(str(meta.get("uid")), row, row_name,
                                       active=bool(desired_status.get("active")), now=now,
                                       prepared=prepared)
            except errors.DatabaseUnavailable as exc:
                self.runtime.failed(KIND)
                raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc
        self._write(body, patch, previous, desired_status, action=action, row_name=row_name,
                    describe=desired.describe(), extra=told)
        events.post(body, ran)
        for key, value in podruns.status_delta(previous, pods or {}).items():
            patch.status[key] = value
        result = {"create": "created", "update": "updated", "none": "unchanged",
                  "conflict": "conflict"}[action]
        self.runtime.reconciled(KIND, result)
        return result

    def _problem(self, namespace: str, desired: specs.JobScheduleSpec,
                 row: ScheduleRecord | None) -> tuple[str, str] | None:
        """Why the schedule's runs cannot work although its row is right, if they cannot:
        a pod-run schedule's DSN Secret is missing, or a worker could not import the job
        class since the schedule's last success (docs/kubernetes.md)."""
        if desired.pod_run is not None:
            found = self.secrets.problem(namespace, desired.pod_run.dsn_secret,
                                         desired.pod_run.dsn_key)
            if found is not None:
                return found
        if row is not None and row.class_unimportable:
            return sst.class_problem(job_class=row.job_class, error=row.class_error,
                                     host=row.class_error_host, at=row.class_error_at)
        return None

    def _run_events(self, uid: str, row: ScheduleRecord, row_name: str, *, active: bool,
                    now: dt.datetime, prepared: Prepared | None = None) -> list[st.Event]:
        """Per-run Events as a CronJob posts them, aggregated (jobschedules/runevents.py).
        The schedule's jobs are read only when one was or is active or a slot was
        enqueued since the last pass: an idle schedule's pass reads nothing more (nor
        one whose batch read them from the same floor)."""
        enqueued = int(row.enqueued_count)
        outcomes: list[runevents.Outcome] = []
        if self.run_events.needs_read(uid, enqueued=enqueued, active=active):
            floor = self.run_events.floor(uid, last_job_id=row.last_job_id)
            if prepared is not None and prepared.outcomes is not None \
                    and prepared.outcomes[0] == floor:
                outcomes = prepared.outcomes[1]
            else:
                outcomes = [
                    runevents.Outcome(id=i, status=status, unique_key=key, error=error)
                    for i, status, key, error in self.runtime.client.schedules.job_outcomes(
                        row_name, floor=floor)]
        return self.run_events.observe(
            uid, enqueued=enqueued, skipped=int(row.skipped_count),
            missed=int(row.missed_count), outcomes=outcomes, overlap=row.overlap,
            catch_up=row.catch_up, now=time.monotonic(), wall=now)

    def _cronjob_parity(self, body: kopf.Body, row: ScheduleRecord,
                        desired: specs.JobScheduleSpec, status: dict[str, Any], *,
                        previous: dict[str, Any], row_name: str, now: dt.datetime,
                        prepared: Prepared | None = None) -> list[st.Event]:
        """What a CronJob user expects (in place on ``status``): ``active``,
        ``lastSuccessfulTime``, the history limits, and run-now by annotation (the
        limits and the active jobs as the batch found them, if it did)."""
        store = self.runtime.client.schedules
        posted: list[st.Event] = []
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        request = annotations.get(RUN_NOW_ANNOTATION)
        done = previous.get("runNow") or {}
        if request and done.get("request") != str(request):
            run = store.run_now(row_name, request=str(request))
            status["runNow"] = {"request": str(request), "jobId": str(run.job_id),
                                "at": st.timestamp(now)}
            logger.info("schedule %s: run-now %r -> job %d%s", row_name, request, run.job_id,
                        " (already enqueued)" if run.duplicate else "")
            posted.append(st.Event(type="Normal", reason="RunNow",
                                   message=f"run-now {request!r}: job {run.job_id}"))
        # Always, limits or not: the row records them (or that they were removed),
        # which tells the database-wide retention whose jobs it leaves alone.
        limits = (desired.successful_history, desired.failed_history)
        if prepared is not None and prepared.limits == limits:
            trimmed = prepared.trimmed
        else:
            trimmed = store.trim_history(row_name, successful=limits[0], failed=limits[1])
        if trimmed:
            logger.info("schedule %s: %d finished job(s) beyond the history limits "
                        "deleted", row_name, trimmed)
        if prepared is not None and not posted:  # no run-now enqueued since the batch
            active = prepared.active
        else:
            active = store.active_jobs(row_name, limit=ACTIVE_SHOWN)
        status.pop("active", None)
        if active:
            status["active"] = [{"id": str(job_id), "status": state} for job_id, state in active]
        status.pop("lastSuccessfulTime", None)
        if row.last_success_at is not None:
            status["lastSuccessfulTime"] = st.timestamp(row.last_success_at)
        return posted

    def _write(self, body: kopf.Body, patch: kopf.Patch, previous: dict[str, Any],
               desired_status: dict[str, Any], *, action: sst.ScheduleAction | None,
               row_name: str, describe: str = "", extra: list[st.Event] | None = None) -> None:
        delta = st.status_patch(previous, desired_status, sst.SCHEDULE_KEYS)
        for key, value in delta.items():
            patch.status[key] = value
        if action == "create":
            events.post(body, [st.Event(type="Normal", reason="Created",
                                        message=f"schedule {row_name!r} created: {describe}")])
        elif action == "update":
            events.post(body, [st.Event(type="Normal", reason="Updated",
                                        message=f"schedule {row_name!r} updated: {describe}")])
        # Transitions (and ``extra``, what the status records): once it is written.
        told = st.condition_events(previous.get("conditions"),
                                   desired_status.get("conditions", []))
        told += sst.problem_events(previous.get("conditions"),
                                   desired_status.get("conditions", []))
        events.post_with_status(body, told + list(extra or ()))

    def delete(self, *, body: kopf.Body) -> None:
        meta = body.get("metadata", {})
        row_name = specs.schedule_row_name(str(meta.get("namespace") or "default"),
                                           str(meta.get("name")))
        self.run_events.forget(str(meta.get("uid")))
        if self.runtime.pod_runs is not None:
            self.runtime.pod_runs.forget(str(meta.get("uid")))
        store = self.runtime.client.schedules
        try:
            row = store.get(row_name)
            if row is not None and row.source == self.runtime.source:
                store.delete(row_name)
                logger.info("deleted schedule %s", row_name)
                self.runtime.reconciled(KIND, "deleted")
            else:
                logger.info("schedule %s is not this cluster's (%s): left in place", row_name,
                            row.source if row is not None else "no row")
                self.runtime.reconciled(KIND, "released")
        except errors.DatabaseUnavailable as exc:
            self.runtime.failed(KIND)
            raise kopf.TemporaryError(f"database unavailable: {exc}", delay=5) from exc


    def sweep(self, *, present: set[tuple[str, str]],
              exists: Callable[[str, str], bool]) -> int:
        """Delete this cluster's rows whose JobSchedule is gone; the number deleted.

        Only rows this cluster wrote (``source``), in namespaces this operator
        watches, that the cache does not hold (``present``), and that ``exists``
        (a GET) confirms gone: a resource created a moment ago is never swept.
        """
        watched = set(self.runtime.config.namespaces)
        swept = 0
        # Names only: decoding the full record (three joins) of every row each
        # minute to read its name grows with thousands of schedules.
        for (row_name,) in self.runtime.db.rows("schedule_names_of_source",
                                                {"source": self.runtime.source}):
            if "/" not in row_name:
                continue
            namespace, name = str(row_name).split("/", 1)
            if (watched and namespace not in watched) or (namespace, name) in present:
                continue
            if exists(namespace, name):
                continue
            current = self.runtime.client.schedules.get(row_name)
            if current is not None and current.source == self.runtime.source:
                self.runtime.client.schedules.delete(row_name)
                logger.info("swept schedule %s: its JobSchedule is gone", row_name)
                self.runtime.reconciled(KIND, "swept")
                swept += 1
        return swept


    #: After a change, passed every interval this long: run Events are aggregated for
    #: a minute and posted by a later pass.
    settle_seconds = runevents.MIN_INTERVAL + 10.0

    def fingerprints(self, bodies: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Hashable | None]:
        """By uid, the digest of each schedule's row (one query for all); None for a
        schedule with a pod template (claims, pods and its Secret are time-driven) or
        with active jobs (their list and outcomes are read each pass)."""
        found: dict[str, Hashable | None] = {}
        rows: dict[str, str] = {}
        for body in bodies:
            meta = body.get("metadata") or {}
            uid = str(meta.get("uid"))
            status = body.get("status") or {}
            if (body.get("spec") or {}).get("podTemplate") is not None \
                    or status.get("active") or status.get("activePods"):
                found[uid] = None
                continue
            rows[specs.schedule_row_name(str(meta.get("namespace") or "default"),
                                         str(meta.get("name")))] = uid
        if rows:
            digests = {str(name): str(digest) for name, digest in self.runtime.db.rows(
                "schedule_status_fingerprints", {"names": list(rows)})}
            for name, uid in rows.items():
                found[uid] = digests.get(name, "no row")
        return found

    def confirm(self) -> None:
        """Renew this operator's confirmation of its rows (its watched namespaces, or ''
        for all): runners keep firing them for the grace (``owner_grace_seconds``)."""
        config = self.runtime.config
        self.runtime.client.schedules.confirm_owner(
            source=self.runtime.source, namespaces=list(config.namespaces) or [""],
            holder=config.pod_name, grace_seconds=config.owner_grace_seconds)


def register(registry: kopf.OperatorRegistry, runtime: Runtime) -> ScheduleReconciler:
    reconciler = ScheduleReconciler(runtime)
    handlers.register(registry, runtime, kind=KIND, resource=RESOURCE, reconciler=reconciler,
                      deleter=reconciler, sweeper=reconciler, indexed=False,
                      fingerprinter=reconciler, queued=True, batcher=reconciler)
    return reconciler
