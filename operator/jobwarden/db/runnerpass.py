"""One schedule-runner pass on the wire: a transaction in three messages.

Why its own module: the runner's pass is the one place where Jobwarden writes
thousands of rows of three tables in one transaction, and the cost of doing it
with one named query per call was mostly waiting -- about ten round trips per
1,000 schedules (BEGIN, clock, claim, savepoint, ids, COPY, release,
write-back, history, prune, COMMIT), each a wait for the server process to be
scheduled on a busy machine. Here a pass is:

1. ``BEGIN`` + the claim (clock folded in), one simple-protocol message;
2. the slots' jobs, one binary COPY (the redo after a unique conflict: one
   ``INSERT ... ON CONFLICT DO NOTHING``);
3. NOTIFY, the write-back, the slot history, its prune and ``COMMIT``, one
   simple-protocol message.

Parameters of the simple-protocol messages are bound here, client-side
(``ClientCursor.mogrify``), as in :meth:`Database.in_one_round_trip`; each
statement still runs on its own snapshot, so the write-back sees the jobs the
COPY wrote. The statements and their reasons are in ``sql/schedules.sql``.
Replace-policy cancellations run between 1 and 2 on the same connection
(:attr:`RunnerPass.conn`), inside the transaction.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format, TransactionStatus

from jobwarden.db.arrays import array_literal
from jobwarden.db.faults import translate_errors
from jobwarden.structs.schedules import DueSchedule, JobRow, PassWrite

if TYPE_CHECKING:
    from jobwarden.db.database import Connection, Database

__all__ = ["RunnerPass", "SlotConflict", "runner_pass"]

#: The binary types of schedule_runner_copy_jobs's columns, in its order.
_COPY_TYPES = ("text", "text", "jsonb", "int4", "int4", "float8", "bool", "text", "text",
               "text", "text", "text", "int8")


class SlotConflict(Exception):
    """The COPY met a slot whose job exists, or the history insert a slot that has a
    row; the pass was rolled back (redo it: ``page`` is what the runner claimed)."""

    page: Any = None


class _JsonTextDumper(Dumper):
    """A jsonb value that is already JSON text (the schedule's ``data`` as read).

    The binary jsonb format is a version byte and the text, so the stored JSON
    goes back out as it came in, never parsed into Python objects and encoded
    again (that was a tenth of a pass).
    """

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


class RunnerPass:
    """The open transaction of one pass; every method but :meth:`claim` needs it open."""

    def __init__(self, db: Database, conn: Connection) -> None:
        self._db = db
        #: The pass's connection, for statements of the planning step (Replace).
        self.conn = conn
        self._binder = psycopg.ClientCursor(conn)

    def _bind(self, name: str, params: dict[str, Any]) -> str:
        return self._binder.mogrify(self._db.sql(name), params)

    def _bind_arrays(self, name: str, params: dict[str, Any]) -> str:
        """As :meth:`_bind`, list values sent as array literals built here (the SQL casts
        each ``%(x)s::type[]``): psycopg's text array dumper ran a regular expression
        per element, most of a pass's client time once the rest was trimmed."""
        return self._bind(name, {key: array_literal(value) if isinstance(value, list) else value
                                 for key, value in params.items()})

    def _send(self, statements: list[str]) -> list[list[Any]]:
        """Run ``statements`` as one simple-protocol message; each one's rows."""
        with self.conn.cursor() as cur:
            cur.execute(";\n".join(statements).encode(), prepare=False)
            found: list[list[Any]] = []
            while True:
                found.append(cur.fetchall() if cur.description is not None else [])
                if not cur.nextset():
                    return found

    def claim(self, *, now: datetime.datetime | None, limit: int,
              after: tuple[datetime.datetime, str] | None,
              ) -> tuple[datetime.datetime | None, list[DueSchedule]]:
        """BEGIN and lock up to ``limit`` due schedules; the pass's clock (None: none due).

        ``after`` = the (next_slot, name) of the last schedule of the previous page.
        """
        params: dict[str, Any] = {"now": now, "limit": limit}
        if after is None:
            claim = self._bind("schedule_runner_claim", params)
        else:
            claim = self._bind("schedule_runner_claim_after", {
                **params, "after_slot": after[0], "after_name": after[1]})
        rows = self._send(["BEGIN", claim])[1]
        if not rows:
            return None, []
        make = DueSchedule._make
        return rows[0][-1], [make(row[:-1]) for row in rows]

    def job_ids(self, count: int) -> list[int]:
        """``count`` more job ids (a pass with schedules enqueueing several slots)."""
        rows = self.conn.execute(self._db.sql("schedule_runner_job_ids"),
                                 {"count": count}).fetchall()
        return [row[0] for row in rows]

    def copy_jobs(self, rows: Sequence[JobRow]) -> None:
        """Insert the slots' jobs with one COPY; :class:`SlotConflict` if a key exists
        (the transaction is rolled back then: the claim's locks are gone too)."""
        if not rows:
            return
        try:
            with self.conn.cursor() as cur:
                cur.adapters.register_dumper(None, _JsonTextDumper)
                with cur.copy(self._db.sql("schedule_runner_copy_jobs")) as copy:
                    copy.set_types(list(_COPY_TYPES))
                    for row in rows:
                        copy.write_row(row)
        except psycopg.errors.UniqueViolation as exc:
            self.conn.rollback()
            raise SlotConflict(str(exc)) from exc

    def insert_jobs(self, rows: Sequence[JobRow]) -> set[str]:
        """Insert the slots' jobs, skipping slots whose job exists; the keys inserted."""
        if not rows:
            return set()
        found = self.conn.execute(self._db.sql("schedule_runner_insert_jobs"), {
            "queues": [r.queue for r in rows], "classes": [r.job_class for r in rows],
            "datas": [r.data for r in rows], "priorities": [r.priority for r in rows],
            "max_retries": [r.max_retries for r in rows],
            "timeouts": [r.timeout_seconds for r in rows],
            "idempotents": [r.idempotent for r in rows],
            "unique_keys": [r.unique_key for r in rows],
            "lease_names": [r.lease_name for r in rows],
            "schedule_names": [r.schedule_name for r in rows],
            "on_busys": [r.on_busy for r in rows], "pod_runs": [r.pod_run for r in rows],
            "ids": [r.id for r in rows],
        }).fetchall()
        return {row[0] for row in found}

    def finish(self, write: PassWrite, *, keep: int, notify_queues: Sequence[str],
               merge: bool = False) -> None:
        """NOTIFY, write back, record the slots' fates, prune, COMMIT: one message.

        A job is named by its id where the pass knows it; only where it does not (the
        job existed before the pass) does its unique key go out, for a lookup. The
        history is a plain insert unless ``merge``: a slot that has a row already
        raises :class:`SlotConflict` (rolled back: redo the pass with ``merge``).
        """
        instants: dict[datetime.datetime, str] = {}

        def texts(values: Sequence[datetime.datetime | None]) -> list[str | None]:
            # Formatted once per distinct instant: a pass's schedules share most.
            out: list[str | None] = []
            for value in values:
                if value is None:
                    out.append(None)
                    continue
                text = instants.get(value)
                if text is None:
                    text = instants[value] = value.isoformat()
                out.append(text)
            return out

        statements: list[str] = []
        if notify_queues:
            statements.append(self._bind("schedule_runner_notify", {
                "channel": self._db.jobs.channel, "queues": list(notify_queues)}))
        a = write.advances
        if len(a):
            statements.append(self._bind_arrays("schedule_runner_advance", {
                "names": a.name, "ctids": a.ctid, "count": len(a),
                "planned_until": texts(a.planned_until), "last_slot": texts(a.last_slot),
                "last_enqueued_slot": texts(a.last_enqueued_slot),
                "next_slot": texts(a.next_slot), "enqueued": a.enqueued,
                "skipped": a.skipped, "missed": a.missed, "replaced": a.replaced,
                "last_job_id": a.last_job_id,
                "last_key": _unknown(a.last_key, a.last_job_id),
                "error": a.error, "slot_rows": a.slot_rows}))
        if write.hold_names:
            statements.append(self._bind_arrays("schedule_runner_hold", {
                "names": write.hold_names, "ctids": write.hold_ctids}))
        f = write.fates
        if len(f):
            history = "schedule_runner_merge_slots" if merge else "schedule_runner_record_slots"
            statements.append(self._bind_arrays(history, {
                "names": f.name, "slots": texts(f.slot), "fates": f.fate,
                "job_ids": f.job_id, "unique_keys": _unknown(f.unique_key, f.job_id)}))
        if write.prune:
            statements.append(self._bind_arrays("schedule_runner_prune_slots", {
                "names": write.prune, "keep": keep}))
        try:
            self._send([*statements, "COMMIT"])
        except psycopg.errors.UniqueViolation as exc:
            self.conn.rollback()
            raise SlotConflict(str(exc)) from exc


def _unknown(keys: Sequence[str | None], ids: Sequence[int | None]) -> list[str | None]:
    """The unique keys of the jobs whose id is not known (None for the others)."""
    return [key if found is None else None for key, found in zip(keys, ids, strict=True)]


@contextlib.contextmanager
def runner_pass(db: Database) -> Iterator[RunnerPass]:
    """A pooled connection for one pass; whatever is not committed is rolled back."""
    with translate_errors(), db.connections.counting_faults(), db.connection() as conn:
        try:
            yield RunnerPass(db, conn)
        finally:
            if conn.info.transaction_status in (TransactionStatus.INTRANS,
                                                TransactionStatus.INERROR):
                with contextlib.suppress(psycopg.Error):  # a broken connection: the pool's
                    conn.rollback()
