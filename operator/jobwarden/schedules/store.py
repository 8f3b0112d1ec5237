"""The schedule store: define, change, suspend and inspect schedules (``client.schedules``).

Every writer -- the Kubernetes operator (``JobSchedule`` resources), code-defined
schedules synced at worker start, the CLI -- goes through :meth:`Schedules.upsert`,
so every definition is validated the same way before anything is stored: bad
input raises :class:`~jobwarden.schedules.ScheduleError` and changes nothing.

The rules a definition change follows, and why:

* **A new schedule starts from now** (the database clock): slots before it
  existed are nobody's history, so nothing is run or counted for them.
* **A changed expression starts from now too.** The old expression's slots
  that were due but not yet planned are counted as missed (every slot gets a
  fate); the new expression's slots before now never existed.
* **Suspended slots are missed.** While suspended, nothing is enqueued; on
  resume the slots that passed are counted as missed and the schedule starts
  from now (no catch-up of a deliberate pause; the ``JobSchedule`` contract).
* **Manual suspension sticks.** ``suspend()`` (the CLI's ``schedules suspend``)
  survives re-applies of the definition by the operator or by code sync, until
  ``resume()``. A definition that itself says ``suspended`` stays suspended
  through ``resume()``: change the definition instead.
* **Other writers' rows are not overwritten by code.** Code sync passes
  ``replace_other_sources=False``: a row written by Kubernetes or the CLI wins,
  and the clash is reported.
* **Definitions are hashed** (``spec_hash``) so two clusters applying different
  definitions for one name can tell; the hash covers what decides the jobs and
  their timing, not who wrote it.

Each change locks the schedule's row (``SELECT ... FOR UPDATE``), so it is
serialised with runner passes on the same schedule.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import uuid
from typing import TYPE_CHECKING, Any

from jobwarden import errors
from jobwarden.jobs import definitions
from jobwarden.observability import metrics
from jobwarden.schedules import expressions
from jobwarden.schedules.slots import job_spec, passed_slots, slot_key
from jobwarden.schedules.validation import compute_spec_hash, validate
from jobwarden.structs.digests import sha256_hex
from jobwarden.structs.jobs import EnqueueResult
from jobwarden.structs.schedules import (
    RunReport,
    ScheduleDefinition,
    ScheduleHealth,
    ScheduleOwner,
    ScheduleRecord,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobwarden.db.database import Connection, Database

__all__ = [
    "DEFAULT_BACKFILL_MAX",
    "Backfill",
    "Schedules",
    "compute_spec_hash",
    "job_spec",
    "slot_key",
    "validate",
]

#: A backfill enqueues at most this many slots unless told otherwise.
DEFAULT_BACKFILL_MAX = 1000

JobRef = definitions.JobRef


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunNow:
    """The job a run-now enqueued (or found, for a repeated request id)."""

    name: str
    job_id: int
    duplicate: bool

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "job_id": self.job_id, "duplicate": self.duplicate}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Backfill:
    """What a backfill did: the slots of the range and what became of them."""

    name: str
    slots: list[dt.datetime]
    enqueued: int
    duplicates: int
    job_ids: list[int]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "slots": [s.isoformat() for s in self.slots],
                "enqueued": self.enqueued, "duplicates": self.duplicates,
                "job_ids": self.job_ids}


class Schedules:
    """``client.schedules``: the Python API over the schedules table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- define --------------------------------------------------------------------

    def upsert(
        self, name: str, *, cron: str | None = None, interval: str | None = None,
        timezone: str = "UTC", job_class: JobRef, data: Any = None,
        queue: str | None = "default", priority: int | None = 0,
        timeout_seconds: float | None = None, max_retries: int | None = None,
        idempotent: bool | None = None, catch_up: str = "latest",
        catch_up_window_seconds: int = 3600, catch_up_max: int = 10, overlap: str = "Allow",
        suspended: bool = False, source: str = "code", origin: str | None = None,
        pod_run: str | None = None, replace_other_sources: bool = True,
        now: dt.datetime | None = None,
    ) -> ScheduleRecord:
        """Create or change a schedule; everything is validated before anything is stored.

        ``queue``/``priority`` None mean the job's own (from the class when one is
        given, else the Job defaults). With ``replace_other_sources=False`` a row
        written by another source is left untouched and returned as it is (the
        caller compares ``record.source``). ``now`` pins the clock (tests).
        """
        spec = validate(
            name, cron=cron, interval=interval, timezone=timezone, job_class=job_class,
            data=data, queue=queue, priority=priority, timeout_seconds=timeout_seconds,
            max_retries=max_retries, idempotent=idempotent, catch_up=catch_up,
            catch_up_window_seconds=catch_up_window_seconds, catch_up_max=catch_up_max,
            overlap=overlap, suspended=suspended, source=source, origin=origin,
            pod_run=pod_run,
        )
        return self.apply(spec, replace_other_sources=replace_other_sources, now=now)

    def apply(self, spec: ScheduleDefinition, *, replace_other_sources: bool = True,
              now: dt.datetime | None = None) -> ScheduleRecord:
        """Store an already validated definition (see :func:`validate`)."""
        expr = expressions.parse_stored(spec.expression)
        missed = 0
        with self.db.transaction() as conn:
            at = self.db.schedules.now(conn=conn, now=now)
            current = self._lock_or_insert(spec, expr, at, conn)
            if current is not None:
                if current.source != spec.source and not replace_other_sources:
                    return current
                missed = self._change(current, spec, expr, at, conn)
        if missed:
            metrics.SCHEDULE_SLOTS_MISSED.labels(spec.name).inc(missed)
        found = self.get(spec.name)
        assert found is not None
        return found

    def create_many(self, specs: Sequence[ScheduleDefinition]
                    ) -> builtins.dict[str, ScheduleRecord]:
        """Create new schedules, already validated, as :meth:`apply` creates one (each
        starts from now, the database clock), with a bounded number of statements
        whatever their number; by name, the rows created. A name that exists (or is
        created meanwhile) is left alone and not returned: :meth:`apply` it instead."""
        if not specs:
            return {}
        with self.db.transaction() as conn:
            at = self.db.schedules.now(conn=conn)
            created = self.db.schedules.insert_many(
                [(spec, expressions.parse_stored(spec.expression).next_after(at))
                 for spec in specs], planned_until=at, conn=conn)
        return self.db.schedules.get_many(sorted(created)) if created else {}

    def _lock_or_insert(self, spec: ScheduleDefinition, expr: expressions.Expression,
                        at: dt.datetime, conn: Connection) -> ScheduleRecord | None:
        """The locked current row, or None after inserting a new one."""
        table = self.db.schedules
        for _ in range(3):
            current = table.lock(spec.name, conn=conn)
            if current is not None:
                return current
            if table.insert(spec, planned_until=at, next_slot=expr.next_after(at), conn=conn):
                return None
        raise errors.JobwardenError(f"schedule {spec.name!r} kept appearing and disappearing")

    def _change(self, current: ScheduleRecord, spec: ScheduleDefinition,
                expr: expressions.Expression, at: dt.datetime, conn: Connection) -> int:
        """Update a locked row to ``spec``; returns the slots counted missed by the change."""
        by = current.suspended_by
        if spec.suspended:
            suspended, by = True, "manual" if by == "manual" else "spec"
        elif by == "manual":
            suspended = True
        else:
            suspended, by = False, None
        return self._write(current, spec, expr, suspended=suspended, suspended_by=by, at=at,
                           conn=conn)

    def _write(self, current: ScheduleRecord, spec: ScheduleDefinition,
               expr: expressions.Expression, *, suspended: bool, suspended_by: str | None,
               at: dt.datetime, conn: Connection) -> int:
        planned_until = current.planned_until or at
        next_slot = current.next_slot
        missed, last_slot = 0, None
        changed = current.expression != spec.expression
        resumed = current.suspended and not suspended
        if changed or resumed:
            # The schedule starts from now. A running schedule's slots its old expression
            # had not planned yet are missed; slots that passed while it was suspended are
            # not: nobody wanted them run, and counting them paged
            # JobwardenScheduleSlotsMissed on every resume (issue 27).
            if not current.suspended:
                old = expressions.parse_stored(current.expression)
                missed, last_slot = passed_slots(old, since=planned_until, now=at)
            planned_until = max(planned_until, at)
            next_slot = expr.next_after(planned_until)
        elif next_slot is None:
            next_slot = expr.next_after(planned_until)
        self.db.schedules.update(spec, suspended=suspended, suspended_by=suspended_by,
                                 planned_until=planned_until, next_slot=next_slot,
                                 last_slot=last_slot, missed=missed, conn=conn)
        return missed

    def _spec_of(self, record: ScheduleRecord) -> ScheduleDefinition:
        return ScheduleDefinition(
            name=record.name, expression=record.expression, cron=record.cron,
            interval=record.interval,
            interval_seconds=expressions.parse_interval(record.interval)
            if record.interval else None,
            timezone=record.timezone, job_class=record.job_class, data=record.data,
            queue=record.queue, priority=record.priority, timeout_seconds=record.timeout_seconds,
            max_retries=record.max_retries, idempotent=record.idempotent,
            catch_up=record.catch_up, catch_up_window_seconds=record.catch_up_window_seconds,
            catch_up_max=record.catch_up_max, overlap=record.overlap,
            suspended=record.spec_suspended, source=record.source, origin=record.origin,
            spec_hash=record.spec_hash, pod_run=record.pod_run,
        )

    def spec_hash(self, **definition: Any) -> str:
        """The ``spec_hash`` :meth:`upsert` would store for these arguments (nothing stored).

        Lets a writer (the operator) tell whether a row already holds its definition.
        """
        definition.pop("source", None)
        definition.pop("origin", None)
        definition.setdefault("queue", "default")  # upsert's defaults
        definition.setdefault("priority", 0)
        return validate("spec-hash-probe", **definition).spec_hash

    def suspend(self, name: str, *, now: dt.datetime | None = None) -> ScheduleRecord | None:
        """Stop enqueuing (manual: survives re-applies of the definition); None if unknown."""
        return self._set_suspended(name, suspend=True, now=now)

    def resume(self, name: str, *, now: dt.datetime | None = None) -> ScheduleRecord | None:
        """Lift a manual (or removed-from-code) suspension; slots passed meanwhile are skipped,
        not counted missed (nobody wanted them run).

        A definition that says ``suspended`` stays suspended: change the definition.
        """
        return self._set_suspended(name, suspend=False, now=now)

    def _set_suspended(self, name: str, *, suspend: bool,
                       now: dt.datetime | None) -> ScheduleRecord | None:
        missed = 0
        with self.db.transaction() as conn:
            at = self.db.schedules.now(conn=conn, now=now)
            current = self.db.schedules.lock(name, conn=conn)
            if current is None:
                return None
            spec = self._spec_of(current)
            expr = expressions.parse_stored(current.expression)
            if suspend:
                suspended, by = True, "manual"
            elif current.spec_suspended:
                suspended, by = True, "spec"
            else:
                suspended, by = False, None
            missed = self._write(current, spec, expr, suspended=suspended, suspended_by=by,
                                 at=at, conn=conn)
        if missed:
            metrics.SCHEDULE_SLOTS_MISSED.labels(name).inc(missed)
        return self.get(name)

    def confirm_owner(self, *, source: str, namespaces: Sequence[str], holder: str,
                      grace_seconds: int) -> None:
        """An operator confirms the rows it wrote (``source``) in ``namespaces`` ('' = every
        namespace): runners keep firing them for ``grace_seconds`` more, and suspend them
        (``owner-absent``) once that passes without another confirmation."""
        self.db.schedules.owner_renew(source=source, namespaces=namespaces, holder=holder,
                                      grace_seconds=grace_seconds)

    def owners(self) -> builtins.list[ScheduleOwner]:
        """Every operator's confirmation, and whether it is within its grace now."""
        return self.db.schedules.owners()

    def resume_owned(self, name: str, *, source: str) -> bool:
        """Lift an ``owner-absent`` suspension: an operator (``source``) whose resource
        exists answers for the row from now on (its owner back, or another cluster with
        the same spec). The planning point stays: the catch-up rule decides the slots
        that passed. True when a suspension was lifted."""
        return self.db.schedules.owner_resume(name, source=source)

    def job_outcomes(self, name: str, *, floor: int
                     ) -> builtins.list[tuple[int, str, str | None, str | None]]:
        """(id, status, unique_key, last_error) of the schedule's jobs from ``floor`` on,
        oldest first (at most the newest 500): what the operator tells as per-run Events."""
        return self.db.schedules.job_outcomes(name, floor=floor)

    def delete(self, name: str) -> bool:
        """Remove a schedule; its jobs stay (their unique keys still guard their slots)."""
        return self.db.schedules.delete(name)

    # -- read ------------------------------------------------------------------------

    def get(self, name: str) -> ScheduleRecord | None:
        return self.db.schedules.get(name)

    def get_many(self, names: Sequence[str]) -> builtins.dict[str, ScheduleRecord]:
        """The schedules of ``names`` that exist, by name (one statement)."""
        return self.db.schedules.get_many(names)

    def health(self) -> builtins.list[ScheduleHealth]:
        """Per schedule: seconds since its last success and its lag (database clock)."""
        return self.db.schedules.health()

    def expression(self, name: str) -> expressions.Expression:
        record = self._require(name)
        return expressions.parse_stored(record.expression)

    def next_slots(self, name: str, *, count: int = 5,
                   after: dt.datetime | None = None) -> builtins.list[dt.datetime]:
        """The next ``count`` slots (UTC) after ``after`` (default: the database clock)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        expr = self.expression(name)
        start = after or self.db.schedules.now()
        slots: builtins.list[dt.datetime] = []
        while len(slots) < count:
            start = expr.next_after(start)
            slots.append(start)
        return slots

    def _require(self, name: str) -> ScheduleRecord:
        record = self.get(name)
        if record is None:
            raise errors.JobNotFound(f"no schedule named {name!r}")
        return record

    # -- run -------------------------------------------------------------------------

    def enqueue_due(self, *, now: dt.datetime | None = None, limit: int = 1000) -> RunReport:
        """One runner pass now (see :func:`jobwarden.schedules.runner.enqueue_due`)."""
        from jobwarden.schedules import runner

        return runner.enqueue_due(self.db, now=now, limit=limit)

    def backfill(self, name: str, *, start: dt.datetime, end: dt.datetime,
                 max_slots: int = DEFAULT_BACKFILL_MAX) -> Backfill:
        """Enqueue every slot in ``[start, end]`` (a past range), de-duplicated by slot key.

        Slots that already have their job (from the runner or an earlier
        backfill) are reported as duplicates and not enqueued again. The overlap
        policy's skip/replace is not applied (an explicit request), but Forbid and
        Replace runs still carry the schedule's lease. The planning point does not
        move, so the runner is unaffected.
        """
        for label, value in (("start", start), ("end", end)):
            if value.tzinfo is None or value.utcoffset() is None:
                raise ValueError(f"backfill {label} must be timezone-aware (e.g. ...Z)")
        if end < start:
            raise ValueError("backfill end is before its start")
        record = self._require(name)
        now = self.db.schedules.now()
        if end > now:
            raise ValueError(f"backfill end {end.isoformat()} is in the future (now is "
                             f"{now.isoformat()}); future slots are the runner's")
        expr = expressions.parse_stored(record.expression)
        slots = expr.slots_between(start - dt.timedelta(microseconds=1), end,
                                   limit=max_slots + 1)
        if len(slots) > max_slots:
            raise ValueError(f"the range holds more than {max_slots} slots; narrow it or "
                             "raise the maximum")
        specs = [job_spec(name=name, slot=s, job_class=record.job_class, data=record.data,
                          queue=record.queue, priority=record.priority,
                          timeout_seconds=record.timeout_seconds,
                          max_retries=record.max_retries, idempotent=record.idempotent,
                          overlap=record.overlap, pod_run=record.pod_run) for s in slots]
        results: builtins.list[EnqueueResult] = []
        with self.db.transaction() as conn:
            results = self.db.jobs.insert_many(specs, conn=conn)
            fresh = [r for r in results if not r.duplicate]
            self.db.schedules.add_backfill(name, enqueued=len(fresh),
                                           last_job_id=None, conn=conn)
        enqueued = [(spec, r) for spec, r in zip(specs, results, strict=True)
                    if not r.duplicate]
        for spec, _ in enqueued:
            metrics.JOBS_ENQUEUED.labels(spec.queue, spec.job_class).inc()
        if enqueued:
            metrics.SCHEDULE_SLOTS_ENQUEUED.labels(name).inc(len(enqueued))
        return Backfill(name=name, slots=slots, enqueued=len(enqueued),
                        duplicates=len(results) - len(enqueued),
                        job_ids=[r.id for r in results])

    def run_now(self, name: str, *, request: str | None = None) -> RunNow:
        """Enqueue one run of the schedule's job now, outside its slots.

        The equivalent of ``kubectl create job --from=cronjob/x``: the planning
        point, the slot counts and the overlap policy's skip/replace are untouched
        (an explicit request is never dropped, so a Forbid/Replace run still carries
        the schedule's lease but waits for it instead of being skipped). ``request``
        makes it idempotent: the same request id enqueues at most one job (the
        operator passes the value of the ``jobwarden.io/run-now`` annotation).
        """
        record = self._require(name)
        now = self.db.schedules.now()
        spec = job_spec(name=name, slot=now, job_class=record.job_class, data=record.data,
                        queue=record.queue, priority=record.priority,
                        timeout_seconds=record.timeout_seconds,
                        max_retries=record.max_retries, idempotent=record.idempotent,
                        overlap=record.overlap, pod_run=record.pod_run)
        token = request if request is not None else uuid.uuid4().hex
        key = f"{name}:run-now:{token}"
        if len(key) > 200:
            key = f"{name[:100]}:run-now:{sha256_hex(key)[:32]}"
        spec = dataclasses.replace(spec, unique_key=key,
                                   on_busy="defer" if spec.lease_name else spec.on_busy)
        [result] = self.db.jobs.insert_many([spec])
        if not result.duplicate:
            metrics.JOBS_ENQUEUED.labels(spec.queue, spec.job_class).inc()
        return RunNow(name=name, job_id=result.id, duplicate=result.duplicate)

    def active_jobs(self, name: str, *, limit: int = 10) -> builtins.list[tuple[int, str]]:
        """(id, status) of the schedule's pending and processing jobs, newest first."""
        return self.db.schedules.active_jobs(name, limit=limit)

    def active_jobs_many(self, names: Sequence[str], *, limit: int = 10
                         ) -> builtins.dict[str, builtins.list[tuple[int, str]]]:
        """:meth:`active_jobs` of many schedules (one statement); every name a key."""
        return self.db.schedules.active_jobs_many(names, limit=limit)

    def job_outcomes_many(self, floors: builtins.dict[str, int]) -> builtins.dict[
            str, builtins.list[tuple[int, str, str | None, str | None]]]:
        """:meth:`job_outcomes` of many schedules, each from its own floor (one
        statement); every name a key."""
        return self.db.schedules.job_outcomes_many(floors)

    def trim_history_many(self, limits: builtins.dict[str, tuple[int | None, int | None]]
                          ) -> builtins.dict[str, int]:
        """:meth:`trim_history` of many schedules (name -> (successful, failed)) with at
        most three statements whatever their number: the limits recorded, then one
        delete per status group a schedule limits (none when no schedule does); by
        name, how many were deleted (only names with some)."""
        self.db.schedules.set_history_limits_many(limits)
        deleted: builtins.dict[str, int] = {}
        for statuses, index in ((["completed"], 0),
                                (["failed", "interrupted", "cancelled"], 1)):
            keeps: builtins.dict[str, int] = {}
            for name, limit in limits.items():
                keep = limit[index]
                if keep is not None:
                    keeps[name] = keep
            for name, count in self.db.schedules.trim_history_many(
                    keeps, statuses=statuses).items():
                deleted[name] = deleted.get(name, 0) + count
        return deleted

    def trim_history(self, name: str, *, successful: int | None,
                     failed: int | None) -> int:
        """Keep the newest ``successful`` completed and ``failed`` failed/interrupted/
        cancelled jobs of the schedule; delete older ones (None keeps all). One
        bounded batch per status group per call; returns how many were deleted.

        The limits are recorded on the schedule's row first: the database-wide
        retention (:mod:`jobwarden.maintenance.retention`) leaves a limited status group's jobs
        to the limit, so the two never both delete (or disagree about) one row.
        Call it with both None when the limits were removed."""
        self.db.schedules.set_history_limits(name, successful=successful, failed=failed)
        deleted = 0
        if successful is not None:
            deleted += self.db.schedules.trim_history(name, statuses=["completed"],
                                                      keep=successful)
        if failed is not None:
            deleted += self.db.schedules.trim_history(
                name, statuses=["failed", "interrupted", "cancelled"], keep=failed)
        return deleted

    def list(self) -> builtins.list[ScheduleRecord]:
        """Every schedule, by name."""
        return self.db.schedules.all()
