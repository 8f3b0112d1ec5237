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
import hashlib
import json
import math
import re
import uuid
from typing import TYPE_CHECKING, Any

from jobwarden import definitions, errors, metrics, textrules
from jobwarden.schedules import expressions, planning
from jobwarden.schedules.errors import ScheduleError
from jobwarden.structs import policies
from jobwarden.structs.jobs import EnqueueResult, JobSpec
from jobwarden.structs.schedules import (
    RunReport,
    ScheduleHealth,
    ScheduleRecord,
    ScheduleSpec,
)

if TYPE_CHECKING:
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

#: Names: what a Kubernetes name, a namespace-qualified name or a Python identifier uses.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$")
#: Room for ``<namespace>/<name>`` of a Kubernetes resource (63 + 1 + 253).
MAX_NAME_LENGTH = 320
#: The longest cron expression, interval or time zone name accepted.
MAX_EXPRESSION_LENGTH = 256
MAX_SOURCE_LENGTH = 64
MAX_CATCH_UP = 1000
_INT32 = 2**31 - 1
#: A backfill enqueues at most this many slots unless told otherwise.
DEFAULT_BACKFILL_MAX = 1000

JobRef = definitions.JobRef


def slot_key(name: str, slot: dt.datetime) -> str:
    """The unique key of a slot's job: ``<name>:<slot in UTC ISO 8601>`` (whole seconds, Z)."""
    utc = slot.astimezone(dt.UTC).replace(microsecond=0)
    return f"{name}:{utc.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def schedule_lease(name: str) -> str:
    """The lease a Forbid/Replace schedule's runs carry: ``schedule:<name>`` (hashed if long)."""
    from jobwarden.db.leases import lease_name

    return lease_name(f"schedule:{name}")


# -- validation --------------------------------------------------------------------


def _fail(name: str, message: str) -> ScheduleError:
    return ScheduleError(f"schedule {name!r}: {message}")


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"a schedule name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ScheduleError(f"schedule name is {len(name)} characters; "
                            f"at most {MAX_NAME_LENGTH} are allowed")
    if not _NAME.match(name):
        raise ScheduleError(
            f"schedule name {name!r} may only contain letters, digits and . _ - : / @ +, "
            "starting with a letter or digit"
        )
    return name


def _int(name: str, field: str, value: object, *, low: int, high: int = _INT32) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"{field} must be a whole number, got {value!r}")
    if value < low:
        raise _fail(name, f"{field} must be at least {low}, got {value}")
    if value > high:
        raise _fail(name, f"{field} must be at most {high}, got {value}")
    return value


def _job_path(name: str, job: JobRef) -> tuple[str, type[definitions.Job] | None]:
    # Only the shape of a path: the schedule's job may live only in the workers.
    try:
        path, cls = definitions.reference(job, must_import=False, try_import=False)
    except errors.UnknownJob as exc:
        raise _fail(name, str(exc)) from None
    if len(path) > 512:
        raise _fail(name, "job class path is longer than 512 characters")
    return path, cls


def _checked_data(name: str, job: JobRef, cls: type[definitions.Job] | None, data: Any, *,
                  may_import: bool) -> Any:
    """Data checked against the job's data type or signature where the code imports.

    A job named by path is only checked (its data is kept as given, so hosts with
    and without the code compute the same definition); a class or @job function is
    also encoded (a dataclass instance becomes its JSON form).
    """
    target = cls
    if isinstance(job, str):
        if not may_import:
            return data
        try:
            target = definitions.resolve(job)
        except errors.UnknownJob:
            return data  # the code lives only in the workers: the shape check is all
    if target is None:
        return data
    try:
        encoded = definitions.encode_data(target, data)
    except errors.InvalidJobData as exc:
        raise _fail(name, str(exc)) from None
    return data if isinstance(job, str) else encoded


def compute_spec_hash(fields: dict[str, Any]) -> str:
    """A stable hash of a definition: the same on every host, Python version and cluster."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def validate(
    name: str, *, cron: str | None = None, interval: str | None = None,
    timezone: str = "UTC", job_class: JobRef, data: Any = None, queue: str | None = None,
    priority: int | None = None, timeout_seconds: float | None = None,
    max_retries: int | None = None, idempotent: bool | None = None, catch_up: str = "latest",
    catch_up_window_seconds: int = 3600, catch_up_max: int = 10, overlap: str = "Allow",
    suspended: bool = False, source: str = "code", origin: str | None = None,
) -> ScheduleSpec:
    """Check a definition and return it normalised; raise ScheduleError naming what is wrong.

    Pure (no database): the operator can use it to validate a resource before it
    writes anything. A job given as a class (or ``@job`` function) fills the
    unset queue, priority, timeout, retries and idempotency from the class, so
    every runner enqueues identical jobs whether or not it can import the class.
    """
    name = _check_name(name)
    # Expressions are short; a long one is refused before any message quotes it
    # (a 10 KB string must not come back in full in an error, a log or a status).
    for field, text in (("cron expression", cron), ("interval", interval),
                        ("time zone", timezone)):
        if isinstance(text, str):
            if len(text) > MAX_EXPRESSION_LENGTH:
                raise _fail(name, f"{field} is {len(text)} characters; at most "
                                  f"{MAX_EXPRESSION_LENGTH} are allowed")
            if textrules.problem(text):
                raise _fail(name, f"{field} {textrules.problem(text)}")
    if timezone is None or not isinstance(timezone, str):
        raise _fail(name, f"time zone must be an IANA name such as 'Europe/Berlin', "
                          f"got {timezone!r}")
    try:
        expr = expressions.parse(cron, interval=interval, timezone=timezone)
    except ScheduleError as exc:
        raise _fail(name, str(exc)) from None
    path, cls = _job_path(name, job_class)
    # Resources applied to the cluster never make the operator import modules they name.
    data = _checked_data(name, job_class, cls, data, may_import=source in ("code", "cli"))
    try:
        json.dumps(data, allow_nan=False)
        textrules.check_json_text(data)
    except (TypeError, ValueError) as exc:
        raise _fail(name, f"job data must be JSON-serialisable: {exc}") from None
    if queue is None and cls is not None:
        queue = cls.queue
    if queue is not None and (not isinstance(queue, str) or not 1 <= len(queue) <= 128
                              or queue.strip() != queue or textrules.problem(queue)):
        shown = textrules.echo(queue) if isinstance(queue, str) else repr(queue)
        raise _fail(name, f"queue must be a non-blank name of at most 128 characters "
                          f"(no NUL, valid Unicode), got {shown}")
    if priority is None and cls is not None:
        priority = cls.priority
    if priority is not None:
        priority = _int(name, "priority", priority, low=-_INT32 - 1)
    if timeout_seconds is None and cls is not None:
        timeout_seconds = float(cls.timeout)
    if timeout_seconds is not None:
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) \
                or not math.isfinite(timeout_seconds) or timeout_seconds <= 0:
            raise _fail(name, f"timeout_seconds must be a positive number, "
                              f"got {timeout_seconds!r}")
        timeout_seconds = float(timeout_seconds)
    if max_retries is None and cls is not None:
        max_retries = cls.max_retries
    if max_retries is not None:
        max_retries = _int(name, "max_retries", max_retries, low=0)
    if idempotent is None and cls is not None:
        idempotent = cls.idempotent
    if idempotent is not None and not isinstance(idempotent, bool):
        raise _fail(name, f"idempotent must be true or false, got {idempotent!r}")
    if catch_up not in ("latest", "none", "all"):
        raise _fail(name, f"catch-up must be one of 'latest', 'none', 'all', got {catch_up!r}")
    window = _int(name, "catch-up window (seconds)", catch_up_window_seconds,
                  low=planning.MIN_WINDOW_SECONDS)
    cap = _int(name, "catch-up max", catch_up_max, low=1, high=MAX_CATCH_UP)
    try:
        planning.validate_catch_up(catch_up=catch_up, window_seconds=window, max_catch_up=cap)
    except ScheduleError as exc:
        raise _fail(name, str(exc)) from None
    policy = next((p for p in policies.OVERLAPS if isinstance(overlap, str) and p.lower() ==
                   overlap.lower()), None)
    if policy is None:
        allowed = ", ".join(policies.OVERLAPS)
        raise _fail(name, f"overlap policy must be one of {allowed}, got {overlap!r}")
    if not isinstance(suspended, bool):
        raise _fail(name, f"suspended must be true or false, got {suspended!r}")
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_LENGTH:
        raise _fail(name, f"source must be a non-blank label of at most {MAX_SOURCE_LENGTH} "
                          f"characters, got {source!r}")
    if origin is not None and (not isinstance(origin, str) or len(origin) > 512):
        raise _fail(name, "origin must be a string of at most 512 characters")

    interval_seconds = expr.seconds if isinstance(expr, expressions.IntervalExpression) else None
    cron_text = expr.cron if isinstance(expr, expressions.CronExpression) else None
    hashed = compute_spec_hash({
        "expression": expr.canonical(), "job_class": path, "data": data, "queue": queue,
        "priority": priority, "timeout_seconds": timeout_seconds, "max_retries": max_retries,
        "idempotent": idempotent, "catch_up": catch_up, "catch_up_window_seconds": window,
        "catch_up_max": cap, "overlap": policy, "suspended": suspended,
    })
    return ScheduleSpec(
        name=name, expression=expr.canonical(), cron=cron_text,
        interval=expressions.format_interval(interval_seconds) if interval_seconds else None,
        interval_seconds=interval_seconds,
        timezone=expr.timezone if isinstance(expr, expressions.CronExpression) else "UTC",
        job_class=path, data=data,
        queue=queue, priority=priority, timeout_seconds=timeout_seconds,
        max_retries=max_retries, idempotent=idempotent, catch_up=catch_up,
        catch_up_window_seconds=window, catch_up_max=cap, overlap=policy,
        suspended=suspended, source=source, origin=origin, spec_hash=hashed,
    )


def job_spec(*, name: str, slot: dt.datetime, job_class: str, data: Any, queue: str | None,
             priority: int | None, timeout_seconds: float | None, max_retries: int | None,
             idempotent: bool | None, overlap: str) -> JobSpec:
    """The job of one slot. Unset fields take the Job defaults, the same on every runner."""
    base = definitions.Job
    return JobSpec(
        job_class=job_class, data=data, queue=queue or base.queue,
        priority=base.priority if priority is None else priority,
        max_retries=base.max_retries if max_retries is None else max_retries,
        timeout_seconds=float(base.timeout if timeout_seconds is None else timeout_seconds),
        idempotent=base.idempotent if idempotent is None else idempotent,
        unique_key=slot_key(name, slot),
        lease_name=schedule_lease(name) if overlap in ("Forbid", "Replace") else None,
        # Forbid: a run that finds the previous one still holding the lease is dropped
        # (never queued behind it); Replace: the new run waits until the old one stopped.
        on_busy={"Forbid": "skip", "Replace": "defer"}.get(overlap),
        schedule_name=name,
    )


def passed_slots(expr: expressions.Expression, *, since: dt.datetime,
                 now: dt.datetime) -> tuple[int, dt.datetime | None]:
    """How many slots of ``expr`` lie in ``(since, now]`` and the newest of them.

    For slots that get no run (a pause, a replaced expression): all are missed.
    Bounded like the runner's plan (a lower bound after very long cron pauses).
    """
    if now <= since:
        return 0, None
    plan = planning.plan_due(expr, last_slot=since, now=now, catch_up="none",
                             tolerance_seconds=0)
    newest = expr.prev_at_or_before(now)
    return plan.missed + len(plan.run), newest if newest is not None and newest > since else None


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
        replace_other_sources: bool = True, now: dt.datetime | None = None,
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
        )
        return self.apply(spec, replace_other_sources=replace_other_sources, now=now)

    def apply(self, spec: ScheduleSpec, *, replace_other_sources: bool = True,
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

    def _lock_or_insert(self, spec: ScheduleSpec, expr: expressions.Expression,
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

    def _change(self, current: ScheduleRecord, spec: ScheduleSpec,
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

    def _write(self, current: ScheduleRecord, spec: ScheduleSpec,
               expr: expressions.Expression, *, suspended: bool, suspended_by: str | None,
               at: dt.datetime, conn: Connection) -> int:
        planned_until = current.planned_until or at
        next_slot = current.next_slot
        missed, last_slot = 0, None
        changed = current.expression != spec.expression
        resumed = current.suspended and not suspended
        if changed or resumed:
            # The old expression's slots not yet planned (or paused) are missed; the
            # schedule starts from now.
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

    def _spec_of(self, record: ScheduleRecord) -> ScheduleSpec:
        return ScheduleSpec(
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
            spec_hash=record.spec_hash,
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
        """Lift a manual (or removed-from-code) suspension; slots passed are counted missed.

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

    def delete(self, name: str) -> bool:
        """Remove a schedule; its jobs stay (their unique keys still guard their slots)."""
        return self.db.schedules.delete(name)

    # -- read ------------------------------------------------------------------------

    def get(self, name: str) -> ScheduleRecord | None:
        return self.db.schedules.get(name)

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
                          overlap=record.overlap) for s in slots]
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
                        overlap=record.overlap)
        token = request if request is not None else uuid.uuid4().hex
        key = f"{name}:run-now:{token}"
        if len(key) > 200:
            key = f"{name[:100]}:run-now:{hashlib.sha256(key.encode()).hexdigest()[:32]}"
        spec = dataclasses.replace(spec, unique_key=key,
                                   on_busy="defer" if spec.lease_name else spec.on_busy)
        [result] = self.db.jobs.insert_many([spec])
        if not result.duplicate:
            metrics.JOBS_ENQUEUED.labels(spec.queue, spec.job_class).inc()
        return RunNow(name=name, job_id=result.id, duplicate=result.duplicate)

    def active_jobs(self, name: str, *, limit: int = 10) -> builtins.list[tuple[int, str]]:
        """(id, status) of the schedule's pending and processing jobs, newest first."""
        return self.db.schedules.active_jobs(name, limit=limit)

    def trim_history(self, name: str, *, successful: int | None,
                     failed: int | None) -> int:
        """Keep the newest ``successful`` completed and ``failed`` failed/interrupted/
        cancelled jobs of the schedule; delete older ones (None keeps all). One
        bounded batch per status group per call; returns how many were deleted."""
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
