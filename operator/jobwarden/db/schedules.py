"""Operations on the schedules table, named table-first and returning dataclasses.

Only SQL lives here; what to write (catch-up, overlap, suspension rules) is
decided by :mod:`jobwarden.schedules.store` and :mod:`jobwarden.schedules.runner`,
which compute slots and hand this module plain values. Statements that must
commit together take the caller's ``conn`` (one transaction per decision).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from psycopg.types.json import Jsonb

from jobwarden.structs.schedules import (
    SLOT_FATES,
    SLOT_HISTORY,
    ScheduleHealth,
    ScheduleRecord,
    ScheduleSpec,
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


def _record(row: Row) -> ScheduleRecord:
    (name, expression, cron, interval_seconds, timezone, job_class, data, queue, priority,
     timeout, max_retries, idempotent, catch_up, window, catch_up_max, overlap, suspended,
     suspended_by, spec_suspended, source, origin, spec_hash, planned_until, last_slot,
     last_enqueued_slot, next_slot, enqueued, skipped, missed, last_job_id, last_job_status,
     last_job_finished_at, last_success_at, last_error, created_at, updated_at, pod_run,
     replaced, dropped, deferred) = row
    return ScheduleRecord(
        name=name, cron=cron, interval=_interval_text(interval_seconds), timezone=timezone,
        job_class=job_class, data=data, queue=queue, priority=priority, timeout_seconds=timeout,
        max_retries=max_retries, catch_up=catch_up, catch_up_window_seconds=window,
        catch_up_max=catch_up_max, overlap=overlap, suspended=suspended, source=source,
        spec_hash=spec_hash, last_slot=last_slot,
        next_slot=None if suspended else next_slot, enqueued_count=enqueued,
        skipped_count=skipped, missed_count=missed, last_job_id=last_job_id,
        last_job_status=last_job_status, last_success_at=last_success_at,
        created_at=created_at, updated_at=updated_at, expression=expression,
        idempotent=idempotent, suspended_by=suspended_by, spec_suspended=spec_suspended,
        origin=origin, planned_until=planned_until, last_enqueued_slot=last_enqueued_slot,
        last_job_finished_at=last_job_finished_at, last_error=last_error, pod_run=pod_run,
        replaced_count=replaced, dropped_count=dropped, deferred_count=deferred,
    )


def _spec_params(spec: ScheduleSpec) -> dict[str, Any]:
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


class SchedulesTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- reads ---------------------------------------------------------------------

    def get(self, name: str) -> ScheduleRecord | None:
        found = self._db.row("schedule_get", {"name": name})
        return _record(found) if found else None

    def all(self) -> list[ScheduleRecord]:
        return [_record(r) for r in self._db.rows("schedule_list")]

    def health(self) -> list[ScheduleHealth]:
        """Seconds since each schedule's last success and its lag, on the database clock."""
        return [
            ScheduleHealth(name=name, seconds_since_success=float(since), lag_seconds=float(lag),
                           ever_succeeded=bool(ever), suspended=bool(suspended))
            for name, since, lag, ever, suspended in self._db.rows("schedule_health")
        ]

    def active_jobs(self, name: str, *, limit: int = 10) -> list[tuple[int, str]]:
        """(id, status) of the schedule's pending and processing jobs, newest first."""
        return [(int(i), str(status)) for i, status in
                self._db.rows("schedule_active_jobs", {"name": name, "limit": limit})]

    def trim_history(self, name: str, *, statuses: Sequence[str], keep: int,
                     batch: int = 500) -> int:
        """Delete the schedule's finished jobs in ``statuses`` beyond the newest ``keep``."""
        return self._db.execute("schedule_trim_history", {
            "name": name, "statuses": list(statuses), "keep": keep, "batch": batch})

    def set_history_limits(self, name: str, *, successful: int | None,
                           failed: int | None) -> bool:
        """Record the schedule's history limits; True when they changed."""
        return self._db.execute("schedule_set_history_limits", {
            "name": name, "successful": successful, "failed": failed}) > 0

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

    def insert(self, spec: ScheduleSpec, *, planned_until: datetime.datetime,
               next_slot: datetime.datetime | None, conn: Connection) -> bool:
        """Insert a new schedule; False when the name exists (nothing written)."""
        return self._db.row("schedule_insert", {
            **_spec_params(spec), "suspended": spec.suspended,
            "suspended_by": "spec" if spec.suspended else None,
            "planned_until": planned_until, "next_slot": next_slot,
        }, conn=conn) is not None

    def update(self, spec: ScheduleSpec, *, suspended: bool, suspended_by: str | None,
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

    # -- code-defined schedules ----------------------------------------------------

    def code_rows(self) -> list[tuple[str, str | None]]:
        return [(r[0], r[1]) for r in self._db.rows("schedule_code_rows")]

    def mark_removed(self, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        return [r[0] for r in self._db.rows("schedule_mark_removed", {"names": list(names)})]
