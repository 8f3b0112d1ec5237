"""Operations on the schedules table, named table-first and returning dataclasses.

Only SQL lives here; what to write (catch-up, overlap, suspension rules) is
decided by :mod:`jobwarden.schedules.store` and :mod:`jobwarden.schedules.runner`,
which compute slots and hand this module plain values. Statements that must
commit together take the caller's ``conn`` (one transaction per decision).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from psycopg.types.json import Jsonb

from jobwarden.structs.policies import CatchUp, Overlap
from jobwarden.structs.schedules import (
    OWNER_ABSENT,
    SLOT_FATES,
    SLOT_HISTORY,
    ScheduleDefinition,
    ScheduleHealth,
    ScheduleOwner,
    ScheduleRecord,
    SlotFate,
)

if TYPE_CHECKING:
    from jobwarden.db.database import Connection, Database, Row


def _interval_text(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


class ScheduleColumns(NamedTuple):
    """fragment_schedule_record's columns, named as the statement names them (checked
    by tests/db/test_named_rows.py): the stored row, the status and end of its last
    slot's job, its last success, and the newest failure to import its job class."""

    name: str
    expression: str
    cron: str | None
    interval_seconds: int | None
    timezone: str
    job_class: str
    data: Any
    queue: str | None
    priority: int | None
    timeout_seconds: float | None
    max_retries: int | None
    idempotent: bool | None
    catch_up: CatchUp
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: Overlap
    suspended: bool
    suspended_by: str | None
    spec_suspended: bool
    source: str
    origin: str | None
    spec_hash: str
    planned_until: datetime.datetime | None
    last_slot: datetime.datetime | None
    last_enqueued_slot: datetime.datetime | None
    next_slot: datetime.datetime | None
    enqueued_count: int
    skipped_count: int
    missed_count: int
    last_job_id: int | None
    last_job_status: str | None
    last_job_finished_at: datetime.datetime | None
    last_success_at: datetime.datetime | None
    last_error: str | None
    created_at: datetime.datetime
    updated_at: datetime.datetime
    pod_run: str | None
    replaced_count: int
    dropped_count: int
    deferred_count: int
    owner_held_at: datetime.datetime | None
    class_error: str | None
    class_error_host: str | None
    class_error_at: datetime.datetime | None


def _record(row: Row) -> ScheduleRecord:
    c = ScheduleColumns._make(row)
    suspended, suspended_by = c.suspended, c.suspended_by
    if c.owner_held_at is not None and not suspended:
        # Held by the runners while its owner is absent (migration 0022): suspended, to
        # every reader and to the store's rules (a write of the definition lifts it).
        suspended, suspended_by = True, OWNER_ABSENT
    return ScheduleRecord(
        name=c.name, cron=c.cron, interval=_interval_text(c.interval_seconds),
        timezone=c.timezone, job_class=c.job_class, data=c.data, queue=c.queue,
        priority=c.priority, timeout_seconds=c.timeout_seconds, max_retries=c.max_retries,
        catch_up=c.catch_up, catch_up_window_seconds=c.catch_up_window_seconds,
        catch_up_max=c.catch_up_max, overlap=c.overlap, suspended=suspended, source=c.source,
        spec_hash=c.spec_hash, last_slot=c.last_slot,
        next_slot=None if suspended else c.next_slot, enqueued_count=c.enqueued_count,
        skipped_count=c.skipped_count, missed_count=c.missed_count,
        last_job_id=c.last_job_id, last_job_status=c.last_job_status,
        last_success_at=c.last_success_at, created_at=c.created_at, updated_at=c.updated_at,
        expression=c.expression, idempotent=c.idempotent, suspended_by=suspended_by,
        spec_suspended=c.spec_suspended, origin=c.origin, planned_until=c.planned_until,
        last_enqueued_slot=c.last_enqueued_slot, last_job_finished_at=c.last_job_finished_at,
        last_error=c.last_error, pod_run=c.pod_run, replaced_count=c.replaced_count,
        dropped_count=c.dropped_count, deferred_count=c.deferred_count,
        class_error=c.class_error, class_error_host=c.class_error_host,
        class_error_at=c.class_error_at,
    )


def _spec_params(spec: ScheduleDefinition) -> dict[str, Any]:
    return {
        "name": spec.name, "expression": spec.expression, "cron": spec.cron,
        "interval_seconds": spec.interval_seconds, "timezone": spec.timezone,
        "job_class": spec.job_class, "data": Jsonb(spec.data), "queue": spec.queue,
        "priority": spec.priority, "timeout_seconds": spec.timeout_seconds,
        "max_retries": spec.max_retries, "idempotent": spec.idempotent,
        "catch_up": spec.catch_up, "catch_up_window_seconds": spec.catch_up_window_seconds,
        "catch_up_max": spec.catch_up_max, "overlap": spec.overlap,
        "spec_suspended": spec.suspended, "source": spec.source, "origin": spec.origin,
        "spec_hash": spec.spec_hash, "pod_run": spec.pod_run,
    }


#: schedule_insert_many's arrays, each from one of :func:`_spec_params`'s values.
_MANY_COLUMNS = (
    ("names", "name"), ("expressions", "expression"), ("crons", "cron"),
    ("interval_seconds", "interval_seconds"), ("timezones", "timezone"),
    ("job_classes", "job_class"), ("data", "data"), ("queues", "queue"),
    ("priorities", "priority"), ("timeout_seconds", "timeout_seconds"),
    ("max_retries", "max_retries"), ("idempotent", "idempotent"),
    ("catch_ups", "catch_up"), ("catch_up_window_seconds", "catch_up_window_seconds"),
    ("catch_up_maxes", "catch_up_max"), ("overlaps", "overlap"),
    ("spec_suspended", "spec_suspended"), ("sources", "source"), ("origins", "origin"),
    ("spec_hashes", "spec_hash"), ("pod_runs", "pod_run"),
)


class SchedulesTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- reads ---------------------------------------------------------------------

    def get(self, name: str) -> ScheduleRecord | None:
        found = self._db.row("schedule_get", {"name": name})
        return _record(found) if found else None

    def get_many(self, names: Sequence[str]) -> dict[str, ScheduleRecord]:
        """The schedules of ``names`` that exist, by name (one statement)."""
        if not names:
            return {}
        return {record.name: record for record in
                (_record(r) for r in self._db.rows("schedule_get_many",
                                                   {"names": list(names)}))}

    def all(self) -> list[ScheduleRecord]:
        return [_record(r) for r in self._db.rows("schedule_list")]

    def health(self) -> list[ScheduleHealth]:
        """Seconds since each schedule's last success and its lag, on the database clock."""
        return [
            ScheduleHealth(name=name, seconds_since_success=float(since), lag_seconds=float(lag),
                           ever_succeeded=bool(ever), suspended=bool(suspended),
                           expression=str(expression),
                           seconds_without_success=float(without))
            for name, since, lag, ever, suspended, expression, without
            in self._db.rows("schedule_health")
        ]

    def active_jobs(self, name: str, *, limit: int = 10) -> list[tuple[int, str]]:
        """(id, status) of the schedule's pending and processing jobs, newest first."""
        return [(int(i), str(status)) for i, status in
                self._db.rows("schedule_active_jobs", {"name": name, "limit": limit})]

    def active_jobs_many(self, names: Sequence[str], *, limit: int = 10
                         ) -> dict[str, list[tuple[int, str]]]:
        """:meth:`active_jobs` of every schedule of ``names`` (one statement); every name
        is a key, [] for a schedule with none."""
        found: dict[str, list[tuple[int, str]]] = {name: [] for name in names}
        if names:
            for name, i, status in self._db.rows("schedule_active_jobs_many",
                                                 {"names": list(names), "limit": limit}):
                found[str(name)].append((int(i), str(status)))
        return found

    def job_outcomes(self, name: str, *, floor: int,
                     limit: int = 500) -> list[tuple[int, str, str | None, str | None]]:
        """(id, status, unique_key, last_error) of the schedule's jobs with ``id >=
        floor``, oldest first, the newest ``limit`` at most."""
        rows = self._db.rows("schedule_job_outcomes", {"name": name, "floor": floor,
                                                      "limit": limit})
        return [(int(i), str(status), key, error) for i, status, key, error in reversed(rows)]

    def job_outcomes_many(self, floors: Mapping[str, int], *, limit: int = 500
                          ) -> dict[str, list[tuple[int, str, str | None, str | None]]]:
        """:meth:`job_outcomes` of every schedule of ``floors`` from its own floor (one
        statement); every name is a key."""
        found: dict[str, list[tuple[int, str, str | None, str | None]]] = {
            name: [] for name in floors}
        if floors:
            for name, i, status, key, error in self._db.rows(
                    "schedule_job_outcomes_many", {"names": list(floors),
                                                   "floors": list(floors.values()),
                                                   "limit": limit}):
                found[str(name)].append((int(i), str(status), key, error))
        for outcomes in found.values():
            outcomes.reverse()
        return found

    def trim_history(self, name: str, *, statuses: Sequence[str], keep: int,
                     batch: int = 500) -> int:
        """Delete the schedule's finished jobs in ``statuses`` beyond the newest ``keep``."""
        return self._db.execute("schedule_trim_history", {
            "name": name, "statuses": list(statuses), "keep": keep, "batch": batch})

    def trim_history_many(self, keeps: Mapping[str, int], *, statuses: Sequence[str],
                          batch: int = 500) -> dict[str, int]:
        """:meth:`trim_history` of every schedule of ``keeps``, each keeping its own newest
        ``keep`` (one statement); by name, how many were deleted (only names with some)."""
        if not keeps:
            return {}
        deleted: dict[str, int] = {}
        for (name,) in self._db.rows("schedule_trim_history_many", {
                "names": list(keeps), "keeps": list(keeps.values()),
                "statuses": list(statuses), "batch": batch}):
            deleted[str(name)] = deleted.get(str(name), 0) + 1
        return deleted

    def set_history_limits_many(self, limits: Mapping[str, tuple[int | None, int | None]]
                                ) -> int:
        """:meth:`set_history_limits` of every schedule of ``limits`` (name ->
        (successful, failed)), one statement; how many changed."""
        if not limits:
            return 0
        return self._db.execute("schedule_set_history_limits_many", {
            "names": list(limits), "successful": [s for s, _ in limits.values()],
            "failed": [f for _, f in limits.values()]})

    def set_history_limits(self, name: str, *, successful: int | None,
                           failed: int | None) -> bool:
        """Record the schedule's history limits; True when they changed."""
        return self._db.execute("schedule_set_history_limits", {
            "name": name, "successful": successful, "failed": failed}) > 0

    def seconds_to_next_slot(self, *, recent: float = 0.0) -> float | None:
        """Seconds until the earliest slot of an unsuspended, unheld schedule that was not
        due more than ``recent`` seconds ago (on the database clock; negative when such a
        slot is due already); None when there is none."""
        found = self._db.row("schedule_next_slot_in", {"recent": recent})
        return None if found is None or found[0] is None else float(found[0])

    def now(self, *, conn: Connection | None = None,
            now: datetime.datetime | None = None) -> datetime.datetime:
        """``now`` if given, else the database clock (the transaction's start on ``conn``)."""
        found = self._db.row("schedule_now", {"now": now}, conn=conn)
        assert found is not None
        return cast(datetime.datetime, found[0])

    # -- definitions (the caller holds a transaction) ------------------------------

    def lock(self, name: str, *, conn: Connection) -> ScheduleRecord | None:
        found = self._db.row("schedule_lock", {"name": name}, conn=conn)
        return _record(found) if found else None

    def insert(self, spec: ScheduleDefinition, *, planned_until: datetime.datetime,
               next_slot: datetime.datetime | None, conn: Connection) -> bool:
        """Insert a new schedule; False when the name exists (nothing written)."""
        return self._db.row("schedule_insert", {
            **_spec_params(spec), "suspended": spec.suspended,
            "suspended_by": "spec" if spec.suspended else None,
            "planned_until": planned_until, "next_slot": next_slot,
        }, conn=conn) is not None

    def insert_many(self, specs: Sequence[tuple[ScheduleDefinition, datetime.datetime]], *,
                    planned_until: datetime.datetime, conn: Connection) -> set[str]:
        """:meth:`insert` of many new schedules, each ``(spec, next_slot)``, in one
        statement; the names inserted (a name that exists is left alone)."""
        if not specs:
            return set()
        columns: dict[str, list[Any]] = {
            "names": [], "expressions": [], "crons": [], "interval_seconds": [],
            "timezones": [], "job_classes": [], "data": [], "queues": [], "priorities": [],
            "timeout_seconds": [], "max_retries": [], "idempotent": [], "catch_ups": [],
            "catch_up_window_seconds": [], "catch_up_maxes": [], "overlaps": [],
            "spec_suspended": [], "sources": [], "origins": [], "spec_hashes": [],
            "next_slots": [], "pod_runs": []}
        for spec, next_slot in specs:
            values = _spec_params(spec)
            for column, key in _MANY_COLUMNS:
                columns[column].append(values[key])
            columns["next_slots"].append(next_slot)
        return {str(r[0]) for r in self._db.rows(
            "schedule_insert_many", {**columns, "planned_until": planned_until}, conn=conn)}

    def update(self, spec: ScheduleDefinition, *, suspended: bool, suspended_by: str | None,
               planned_until: datetime.datetime, next_slot: datetime.datetime | None,
               last_slot: datetime.datetime | None, missed: int, conn: Connection) -> None:
        self._db.execute("schedule_update", {
            **_spec_params(spec), "suspended": suspended, "suspended_by": suspended_by,
            "planned_until": planned_until, "next_slot": next_slot, "last_slot": last_slot,
            "missed": missed,
        }, conn=conn)

    def delete(self, name: str) -> bool:
        """Delete the schedule and its slot history together; False if there was none."""
        with self._db.transaction() as conn:
            if self._db.row("schedule_delete", {"name": name}, conn=conn) is None:
                return False
            self._db.execute("schedule_slots_delete", {"name": name}, conn=conn)
            return True

    # -- the runner (its pass itself: db/runnerpass.py) -----------------------------

    def mark_replaced(self, name: str, *, job_id: int, conn: Connection) -> None:
        """The slot whose run was ``job_id`` was replaced (Replace policy, runner's pass)."""
        self._db.execute("schedule_slot_replaced", {"name": name, "job_id": job_id}, conn=conn)

    def slots(self, name: str, *, limit: int = 20) -> list[SlotFate]:
        """The schedule's last slots with their fate, newest first; at most the history's
        bound (:data:`SLOT_HISTORY`; the runner prunes past it with a margin)."""
        return [SlotFate(schedule=name, slot=slot, fate=fate, job_id=job_id,
                         job_status=status, recorded_at=at)
                for slot, fate, job_id, status, at in self._db.rows(
                    "schedule_slot_list", {"name": name, "limit": limit,
                                           "keep": SLOT_HISTORY})]

    def fate_counts(self) -> dict[str, dict[str, int]]:
        """Every schedule's slot fates, counted: ``{name: {fate: count}}``."""
        return {row[0]: dict(zip(SLOT_FATES, (int(v) for v in row[1:]), strict=True))
                for row in self._db.rows("schedule_fate_counts")}

    def cancel_job(self, job_id: int, *, reason: str, conn: Connection) -> str | None:
        """Cancel a pending run or ask a running one to stop; its status after, or None."""
        found = self._db.row("schedule_job_cancel", {"id": job_id, "reason": reason}, conn=conn)
        return str(found[0]) if found else None

    def add_backfill(self, name: str, *, enqueued: int, last_job_id: int | None,
                     conn: Connection | None = None) -> None:
        self._db.execute("schedule_add_backfill", {
            "name": name, "enqueued": enqueued, "last_job_id": last_job_id,
        }, conn=conn)

    # -- owners (migration 0022: a deleted resource's schedule stops firing) --------

    def owner_renew(self, *, source: str, namespaces: Sequence[str], holder: str,
                    grace_seconds: int) -> None:
        """Confirm ``source``'s rows in ``namespaces`` ('' = all) for ``grace_seconds``."""
        self._db.execute("schedule_owner_renew", {
            "source": source, "namespaces": list(namespaces), "holder": holder,
            "grace": grace_seconds})

    def owners(self) -> list[ScheduleOwner]:
        return [ScheduleOwner(source=source, namespace=namespace, holder=holder,
                              renewed_at=renewed_at, grace_seconds=int(grace),
                              fresh=bool(fresh))
                for source, namespace, holder, renewed_at, grace, fresh
                in self._db.rows("schedule_owner_list")]

    def owner_resume(self, name: str, *, source: str) -> bool:
        """Lift an ``owner-absent`` suspension, ``source`` answering for the row from now
        on; True when lifted."""
        return self._db.row("schedule_owner_resume", {"name": name, "source": source}) \
            is not None

    # -- code-defined schedules ----------------------------------------------------

    def code_rows(self) -> list[tuple[str, str | None]]:
        return [(r[0], r[1]) for r in self._db.rows("schedule_code_rows")]

    def mark_removed(self, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        return [r[0] for r in self._db.rows("schedule_mark_removed", {"names": list(names)})]
