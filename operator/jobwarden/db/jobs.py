"""Operations on the jobs table, named table-first and returning dataclasses."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from psycopg.types.json import Jsonb

from jobwarden.db.arrays import array_literal
from jobwarden.structs.jobs import (
    AttemptRecord,
    ClaimedJob,
    Completion,
    EnqueueResult,
    Failure,
    HeartbeatAck,
    JobBatch,
    JobRecord,
    JobSpec,
    QueueStat,
    ReapedJob,
)
from jobwarden.structs.policies import OnBusy
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from collections.abc import Generator

    from jobwarden.db import plans
    from jobwarden.db.basics import Params
    from jobwarden.db.database import Connection, Database, Row
    from jobwarden.structs.search import JobFilter

T = TypeVar("T")

JOBS_TOPIC = "jobs"
#: Terminal writes NOTIFY this topic with the job ids (``Client.wait`` listens).
DONE_TOPIC = "done"

#: From this many rows on, a batch goes through binary COPY (job_copy): four
#: round trips (BEGIN, ids, COPY, COMMIT) instead of one, but no arrays to build
#: and unpack, so it wins once a batch is more than a few dozen rows.
COPY_MIN_ROWS = 32
#: An ``enqueue_many`` batch whose data JSON is larger than this goes through
#: insert_plan (COPY): one ``jsonb`` value holds at most 256 MiB.
BATCH_JSON_MAX_BYTES = 64 * 1024 * 1024
#: The binary types of job_copy's columns, in its order.
_COPY_TYPES = ("int8", "text", "text", "jsonb", "int4", "timestamptz", "int4", "float8",
               "bool", "text", "text", "text", "text", "float8", "text", "text")


#: fragment_job_columns (job_get, job_list, job_search, ...), by name: the columns are
#: named as JobRecord's fields, in its order (tests/db/test_named_rows.py checks
#: every query that returns them), so a row is read by name, not position.
JOB_COLUMNS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(JobRecord))

#: job_attempt_list's columns: AttemptRecord's fields, by name.
ATTEMPT_COLUMNS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(AttemptRecord))


def _record(row: Row) -> JobRecord:
    fields = dict(zip(JOB_COLUMNS, row, strict=True))
    fields["status"] = JobStatus(fields["status"])
    return JobRecord(**fields)


#: A completion's result as JSON text (results are made storable before: cap_result).
_RESULT_JSON = json.JSONEncoder()


def _as_is(encoded: bytes) -> bytes:
    return encoded


def _jsonb(spec: JobSpec) -> Jsonb:
    """The job's data for a jsonb parameter: its JSON as the enqueue already encoded
    it (``JobSpec.data_json``), else encoded here."""
    encoded = spec.encoded_data()
    if encoded is not None:
        return Jsonb(encoded, dumps=_as_is)
    return Jsonb(spec.data)


def _keys_distinct(specs: Sequence[JobSpec]) -> bool:
    """No unique key repeats within the batch (a repeat could never COPY)."""
    keys = [s.unique_key for s in specs if s.unique_key is not None]
    return len(keys) == len(set(keys))


class ClaimColumns(NamedTuple):
    """What every claim returns (fragment_claim_rows, job_claims_of_batch, and the first
    columns of a pod-run claim), named as the statements name them.

    A named tuple: a claimed row is read by name, for what ``_make`` costs over an
    unpack (the claim is the hot path; ``python -m bench.growth`` measures it), and
    tests/db/test_named_rows.py checks the statements return these names in order.
    """

    id: int
    queue: str
    job_class: str
    data: Any
    priority: int
    attempts: int
    max_retries: int
    timeout_seconds: float
    idempotent: bool
    claim_token: uuid.UUID
    lease_name: str | None
    schedule_name: str | None
    #: ``now() - run_at`` in seconds, one ``now()`` for the whole statement.
    queue_wait: float
    on_busy: OnBusy | None
    lease_ttl_seconds: float | None
    trace_context: str | None


class ReapColumns(NamedTuple):
    """What job_reap returns per reaped job, named as the statement names them
    (tests/db/test_named_rows.py checks it): the job, its status after the reap, the
    host that stopped heartbeating, and the statement's counts of leases freed and of
    lease waiters notified (the same on every row)."""

    id: int
    queue: str
    job_class: str
    status_after: str
    claimed_by: str | None
    freed_leases: int
    lease_notifies: int


def claimed_row(row: Row) -> ClaimedJob:
    """A claim row (:class:`ClaimColumns`) as the worker's :class:`ClaimedJob`."""
    c = ClaimColumns._make(row)
    return ClaimedJob(
        id=c.id, queue=c.queue, job_class=c.job_class, data=c.data, priority=c.priority,
        attempt=c.attempts, max_retries=c.max_retries, timeout_seconds=c.timeout_seconds,
        idempotent=c.idempotent, claim_token=c.claim_token, lease_name=c.lease_name,
        schedule_name=c.schedule_name, queue_wait_seconds=float(c.queue_wait),
        on_busy=c.on_busy, lease_ttl_seconds=c.lease_ttl_seconds,
        trace_context=c.trace_context,
    )


def _in_claim_order(claimed: list[ClaimedJob]) -> list[ClaimedJob]:
    """The order the claim picked them in: priority, then run_at (oldest first), then id.

    UPDATE ... RETURNING does not keep the picking order. ``queue_wait_seconds``
    is ``now() - run_at`` with one ``now()`` for the whole statement, so a
    longer wait is an earlier run_at.
    """
    return sorted(claimed, key=lambda c: (-c.priority, -c.queue_wait_seconds, c.id))


class WakeMark(NamedTuple):
    """An idle claimant's wake-up mark (migration 0025, ``job_wakeups``): a single
    enqueue of one of its queues NOTIFYs ``channel`` (which only it LISTENs on)
    instead of every worker. A claim renews it when it took fewer than ``free``
    jobs (a slot is left free), for ``seconds``."""

    channel: str
    free: int
    seconds: float


def _wake_params(wake: WakeMark | None, queues: Sequence[str] | None) -> dict[str, Any]:
    """A claim's wake-up mark parameters (fragment_claim_rows)."""
    if wake is None:
        return {"wake_channel": None, "wake_queues": None, "wake_free": 0, "wake_seconds": 0.0}
    return {"wake_channel": wake.channel, "wake_queues": list(queues) if queues else None,
            "wake_free": wake.free, "wake_seconds": wake.seconds}


class JobsTable:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.channel = f"{db.schema}_{JOBS_TOPIC}"
        self.done_channel = f"{db.schema}_{DONE_TOPIC}"

    def class_failed(self, job_class: str, *, error: str, host: str) -> None:
        """A worker could not import ``job_class`` (the operator reports it on the
        JobSchedules that run it: migration 0023)."""
        self._db.execute("job_class_failure_record", {
            "job_class": job_class, "error": error, "host": host})

    def insert_many(self, specs: Sequence[JobSpec], *,
                    conn: Connection | None = None) -> list[EnqueueResult]:
        """Insert jobs, one result per spec in order (see :func:`insert_plan`)."""
        return self._run(insert_plan(specs, channel=self.channel), conn)

    def claim(self, *, host: str, limit: int, grace_seconds: float,
              queues: Sequence[str] | None = None, host_cap: bool = False,
              batch: uuid.UUID | None = None, wake: WakeMark | None = None
              ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due jobs for ``host``.

        ``batch``: an id the caller chose, fresh for this claim; the claim tokens
        are derived from it, so when this call fails with its outcome unknown
        (:class:`DatabaseUnavailable` after the statement may have committed) the
        caller finds what it claimed with :meth:`claims_of_batch`.

        With ``host_cap`` the claim goes through the host registry: the host's row
        is locked first (shared: a capped host's claims also queue on its advisory
        lock, an uncapped host's do not wait for each other), so nothing is claimed
        while it drains (or is not registered) and at most cap - running across
        every process on the host.

        ``wake``: the claimant's wake-up mark, renewed by the claim (see
        :class:`WakeMark`); None removes its marks.
        """
        if limit <= 0:
            return []
        params: dict[str, Any] = {"host": host, "limit": limit, "grace": grace_seconds,
                                  "batch": batch or uuid.uuid4(), **_wake_params(wake, queues)}
        if host_cap:
            # Lock the host row, then claim with a fresh snapshot (see the queries), in
            # one transaction sent as one round trip: the claim reads the cap and the
            # drain from the locked row itself, so nothing travels back in between.
            name = "job_claim_capped_queues" if queues else "job_claim_capped_any"
            if queues:
                params["queues"] = list(queues)
            rows = self._db.in_one_round_trip([("host_claim_lock", {"host": host}),
                                               (name, params)], prepared=True,
                                              bound=self._db.bounds.claim)[1]
        elif queues:
            rows = self._db.rows("job_claim_queues", {**params, "queues": list(queues)},
                                 bound=self._db.bounds.claim)
        else:
            rows = self._db.rows("job_claim_any", params, bound=self._db.bounds.claim)
        return _in_claim_order([claimed_row(r) for r in rows])

    def claim_idle(self, *, host: str, limit: int, grace_seconds: float,
                   queues: Sequence[str] | None = None, batch: uuid.UUID | None = None,
                   wake: WakeMark | None = None) -> tuple[list[ClaimedJob], float | None]:
        """A capped claim (see :meth:`claim`) that also says how soon the next pending
        job comes due: (claims, seconds until the next one, or None when none waits).

        For a worker whose last claim found nothing: the question rides in the same
        message and transaction as the claim (no transaction of its own), and lets
        the worker sleep longer than its poll interval without missing a delayed
        job, a retry or a deferral, which no NOTIFY announces. Plain text, not
        ``PREPARE``d: an idle worker's pooled connection is closed between its rare
        claims (``Pool.trim``), and a ``PREPARE`` on each new one would be a
        transaction of its own.
        """
        params: dict[str, Any] = {"host": host, "limit": max(limit, 0), "grace": grace_seconds,
                                  "batch": batch or uuid.uuid4(), **_wake_params(wake, queues)}
        claim, due = "job_claim_capped_any", "job_next_due_any"
        if queues:
            claim, due = "job_claim_capped_queues", "job_next_due_queues"
            params["queues"] = list(queues)
        found = self._db.in_one_round_trip([("host_claim_lock", {"host": host}),
                                            (claim, params), (due, params)],
                                           bound=self._db.bounds.claim)
        rows, next_due = found[1], found[2]
        seconds = next_due[0][0] if next_due and next_due[0][0] is not None else None
        return (_in_claim_order([claimed_row(r) for r in rows]),
                None if seconds is None else max(float(seconds), 0.0))

    def unmark_wakeups(self, channel: str) -> None:
        """Remove the wake-up marks of ``channel`` (a stopping worker's: see :class:`WakeMark`)."""
        self._db.execute("job_wakeup_unmark", {"channel": channel})

    def claims_of_batch(self, *, host: str, batch: uuid.UUID,
                        grace_seconds: float) -> list[ClaimedJob]:
        """The jobs the claim ``batch`` took and still holds (heartbeated now)."""
        rows = self._db.rows("job_claims_of_batch", {"host": host, "batch": batch,
                                                     "grace": grace_seconds},
                             bound=self._db.bounds.claim)
        return _in_claim_order([claimed_row(r) for r in rows])

    def claim_outcomes(self, claims: Sequence[tuple[int, uuid.UUID]]
                       ) -> dict[int, tuple[JobStatus, str | None]]:
        """Status and last error of the rows still carrying these (id, claim token)s."""
        if not claims:
            return {}
        rows = self._db.rows("job_claim_outcomes", {"ids": [c[0] for c in claims],
                                                    "tokens": [c[1] for c in claims]},
                             bound=self._db.bounds.record)
        return {r[0]: (JobStatus(r[1]), r[2]) for r in rows}

    def complete_many(self, completions: Sequence[Completion]) -> set[int]:
        """Record successes; returns the ids actually written (the rest were fenced)."""
        if not completions:
            return set()
        if len(completions) == 1:
            [one] = completions
            return {r[0] for r in self._db.call("job_complete_one", {
                "id": one.id, "token": one.claim_token, "result": Jsonb(one.result),
                "lease_lost": one.lease_lost, "done_channel": self.done_channel,
            }, bound=self._db.bounds.record)}
        # The arrays spelled out here as array literals (text the statement casts):
        # psycopg adapting each list element by element cost the worker more per
        # completion than everything else the recorder does for it.
        rows = self._db.call("job_complete_many", {
            "ids": array_literal([c.id for c in completions]),
            "tokens": array_literal([str(c.claim_token) for c in completions]),
            "results": array_literal([_RESULT_JSON.encode(c.result) for c in completions]),
            "lease_lost": array_literal(["t" if c.lease_lost else "f" for c in completions]),
            "done_channel": self.done_channel,
        }, bound=self._db.bounds.record)
        return {r[0] for r in rows}

    def complete_in(self, conn: Any, *, job_id: int, claim_token: uuid.UUID,
                    result: Any) -> bool:
        """Complete a claim on the caller's connection, inside its transaction; False
        when fenced (the claim was taken over: the caller must roll back)."""
        from jobwarden.db import plans  # see _run

        return self._run(complete_tx_plan(job_id=job_id, claim_token=claim_token, result=result,
                                          done_channel=self.done_channel),
                         plans.caller_connection(conn))

    def fail(self, failure: Failure) -> JobStatus | None:
        """Record a failed attempt; returns the new status, or None when fenced."""
        found = self._db.call("job_fail", {
            "id": failure.id, "token": failure.claim_token, "error": failure.error,
            "retryable": failure.retryable, "retry_in": failure.retry_in_seconds,
            "done_channel": self.done_channel,
        }, bound=self._db.bounds.record)
        return JobStatus(found[0][0]) if found else None

    def mark_cancelled(self, *, job_id: int, claim_token: uuid.UUID, error: str,
                       dropped: bool = False) -> bool:
        """Record a cancelled attempt; ``dropped``: never started, its lease was busy
        (on_busy = skip), which is a schedule slot's fate "dropped"."""
        return bool(self._db.call("job_cancelled", {
            "id": job_id, "token": claim_token, "error": error, "dropped": dropped,
            "done_channel": self.done_channel}, bound=self._db.bounds.record))

    def release(self, *, job_id: int, claim_token: uuid.UUID, delay_seconds: float = 0.0,
                deferral: bool = False) -> bool:
        """Give a claim back unrun (attempt refunded); False when fenced."""
        return bool(self._db.call("job_release", {
            "id": job_id, "token": claim_token, "delay": delay_seconds, "deferral": int(deferral),
        }, bound=self._db.bounds.record))

    def heartbeat_many(self, claims: Sequence[tuple[int, uuid.UUID]], *,
                       grace_seconds: float) -> HeartbeatAck:
        if not claims:
            return HeartbeatAck(alive=frozenset(), cancel_requested=frozenset())
        rows = self._db.call("job_heartbeat_many", {
            "ids": [c[0] for c in claims], "tokens": [c[1] for c in claims],
            "grace": grace_seconds,
        }, bound=self._db.bounds.heartbeat)
        return HeartbeatAck(
            alive=frozenset(r[0] for r in rows),
            cancel_requested=frozenset(r[0] for r in rows if r[1]),
        )

    def reap(self, *, limit: int = 500) -> list[ReapedJob]:
        rows = self._db.rows("job_reap", {"limit": limit,
                                          "lease_channel": self._db.leases.channel,
                                          "jobs_channel": self.channel,
                                          "done_channel": self.done_channel})
        return [ReapedJob(id=r.id, queue=r.queue, job_class=r.job_class,
                          status=JobStatus(r.status_after), claimed_by=r.claimed_by)
                for r in map(ReapColumns._make, rows)]

    def get(self, job_id: int) -> JobRecord | None:
        return self._run(get_plan(job_id))

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        """The job's kept attempt history (its last 25 attempts), oldest first."""
        return [AttemptRecord(**dict(zip(ATTEMPT_COLUMNS, row, strict=True)))
                for row in self._db.rows("job_attempt_list", {"id": job_id})]

    def recent(self, *, status: JobStatus | None = None, queue: str | None = None,
             job_class: str | None = None, limit: int = 50) -> list[JobRecord]:
        return self._run(recent_plan(status=status, queue=queue, job_class=job_class,
                                     limit=limit))

    def search(self, where: JobFilter, *, before: int | None = None,
               limit: int = 50) -> list[JobRecord]:
        """One page of matching jobs, newest first; pass the last id seen as ``before``."""
        rows = self._db.rows("job_search", {**where.params(), "before": before, "limit": limit})
        return [_record(r) for r in rows]

    def running(self, *, limit: int = 20) -> list[JobRecord]:
        """The newest running jobs (from the processing partial indexes, never a walk)."""
        return [_record(r) for r in self._db.rows("job_running", {"limit": limit})]

    def schedule_recent(self, name: str, *, limit: int = 5) -> list[JobRecord]:
        """A schedule's latest jobs, newest first (each is one enqueued slot)."""
        return [_record(r) for r in self._db.rows("job_schedule_recent",
                                                  {"name": name, "limit": limit})]

    def count(self, where: JobFilter, *, cap: int) -> int:
        """How many jobs match, counting at most ``cap`` (bounded work)."""
        found = self._db.row("job_count_capped", {**where.params(), "cap": cap})
        return int(found[0]) if found else 0

    def bulk(self, action: str, where: JobFilter, *, batch: int = 1000) -> int:
        """Retry, cancel or purge every matching job in batches; returns rows changed.

        Walks ids downwards in short transactions (one per batch), so a bulk action
        over a million rows never holds a long lock, and a row it changed is never
        visited twice. The filter's statuses are cut down to those the action
        applies to (``BULK_STATUSES``).
        """
        scoped = _scoped(action, where)
        if scoped is None:
            return 0
        params: dict[str, Any] = {**scoped.params(), "batch": batch, "channel": self.channel}
        before = 2**63 - 1
        total = 0
        while True:
            found = self._db.row(f"job_bulk_{action}", {**params, "before": before})
            assert found is not None
            changed, lowest, scanned, _notified = found
            total += int(changed)
            if scanned < batch or lowest is None:
                return total
            before = int(lowest)

    def cancel(self, job_id: int) -> JobStatus | None:
        return self._run(cancel_plan(job_id, done_channel=self.done_channel))

    def retry(self, job_id: int) -> bool:
        return self._run(retry_plan(job_id))

    def purge(self, *, statuses: Sequence[JobStatus], older_than_seconds: float,
              batch: int = 5000) -> int:
        return self._run(purge_plan(statuses=statuses, older_than_seconds=older_than_seconds,
                                    batch=batch))

    def stats(self) -> list[QueueStat]:
        return self._run(stats_plan())

    def oldest_pending(self) -> dict[str, float]:
        """Seconds the oldest due pending job of each queue has waited."""
        return {queue: float(age) for queue, age in self._db.rows("job_oldest_pending")}

    def now(self) -> datetime.datetime:
        return self._db.now()

    def _run(self, plan: plans.Plan[T], conn: Connection | None = None) -> T:
        # db/plans.py is imported by the first plan run, not with this module: a worker
        # claims, beats and records without one, and an idle worker need not hold the
        # plan machinery (~0.1 MiB resident; docs/benchmarks.md, "Renovation, no
        # regression (issue 29)"). The plans below import it the same way.
        from jobwarden.db import plans

        return plans.run(self._db, plan, conn)


def _scoped(action: str, where: JobFilter) -> JobFilter | None:
    """``where`` limited to the statuses ``action`` applies to; None when none remain."""
    # Imported here: searches and bulk actions come from the console and the CLI, and
    # a worker need not hold their filters (docs/benchmarks.md, "Idle worker RSS").
    from jobwarden.structs.search import BULK_STATUSES

    if action not in BULK_STATUSES:
        raise ValueError(f"unknown bulk action {action!r}")
    eligible = BULK_STATUSES[action]
    statuses = tuple(s for s in (where.statuses or eligible) if s in eligible)
    if not statuses:
        return None
    return dataclasses.replace(where, statuses=statuses)


def bulk_count(jobs: JobsTable, action: str, where: JobFilter, *, cap: int) -> int:
    """How many jobs ``action`` would change (the dry run), counting at most ``cap``."""
    scoped = _scoped(action, where)
    return 0 if scoped is None else jobs.count(scoped, cap=cap)


# -- plans: run by the blocking and the asyncio driver alike (db/plans.py) -----------


def _rows(name: str, params: Params | None = None) -> Generator[plans.Instruction, Any, list[Row]]:
    """``plans.rows``, with db/plans.py imported when a plan runs (see ``JobsTable._run``)."""
    from jobwarden.db import plans

    return (yield from plans.rows(name, params))


def insert_plan(specs: Sequence[JobSpec], *,
                channel: str) -> plans.Plan[list[EnqueueResult]]:
    """Insert jobs, one result per spec in order; a unique-key duplicate returns the
    existing id (``duplicate=True``), also for a duplicate within the batch.

    Large batches go through binary COPY (:func:`_copy`). COPY cannot skip a
    conflicting row, so it is tried optimistically, in a transaction of its own (a
    savepoint inside the caller's): when a unique key already exists, that is undone
    and the batch redone by the one-statement ``INSERT ... ON CONFLICT``
    (:func:`_insert_unnest`), which reports each duplicate. Either way the results
    are the same.
    """
    if not specs:
        return []
    if len(specs) == 1:
        return [(yield from _insert_one(specs[0], channel=channel))]
    if len(specs) >= COPY_MIN_ROWS and _keys_distinct(specs):
        from jobwarden.db import plans  # see JobsTable._run

        try:
            copied: list[EnqueueResult] = yield plans.Atomic(_copy(specs, channel=channel))
            return copied
        except plans.UniqueConflict:
            pass
    return (yield from _insert_unnest(specs, channel=channel))


def _copy(specs: Sequence[JobSpec], *, channel: str) -> plans.Plan[list[EnqueueResult]]:
    queues = sorted({s.queue for s in specs})
    found = yield from _rows("job_copy_begin", {"n": len(specs), "queues": queues,
                                                "channel": channel})
    now: datetime.datetime = found[0][0]
    ids: list[int] = found[0][1]
    rows = []
    for id_, s in zip(ids, specs, strict=True):
        run_at = s.run_at if s.run_at is not None else now
        if s.delay_seconds:
            run_at += datetime.timedelta(seconds=s.delay_seconds)
        rows.append((id_, s.queue, s.job_class, _jsonb(s), s.priority, run_at,
                     s.max_retries, s.timeout_seconds, s.idempotent, s.unique_key,
                     s.lease_name, s.schedule_name, s.on_busy, s.lease_ttl_seconds,
                     s.trace_context, s.pod_run))
    if any(s.unique_key is not None for s in specs):
        # In key order (code points), as job_insert_many and job_insert_batch insert
        # (COLLATE "C"): two batches that share keys then wait for each other's keys
        # in one order, never in a cycle (a deadlock).
        rows.sort(key=lambda row: (row[9] is None, row[9] or ""))
    from jobwarden.db import plans  # see JobsTable._run

    yield plans.Copy("job_copy", _COPY_TYPES, rows)
    return [EnqueueResult(id=id_, duplicate=False) for id_ in ids]


def insert_batch_plan(batch: JobBatch, *,
                      channel: str) -> plans.Plan[list[EnqueueResult]]:
    """Insert the rows of one ``enqueue_many`` call in one statement (job_insert_batch),
    one result per row in order, a unique-key duplicate as :func:`insert_plan` reports it.

    The shared columns travel once, the data and the keys as one JSON array each;
    ids are drawn, conflicts skipped and workers notified by the statement itself,
    so the batch is one round trip (and, on a pooled connection, one transaction:
    a bad row anywhere stores nothing). A batch whose JSON is too large for one
    ``jsonb`` value goes through :func:`insert_plan` instead.
    """
    if not len(batch):
        return []
    if len(batch.datas_json) > BATCH_JSON_MAX_BYTES:
        return (yield from insert_plan(batch.specs(), channel=channel))
    s = batch.shared
    keys = batch.unique_keys
    found = yield from _rows("job_insert_batch", {
        "datas": Jsonb(batch.datas_json, dumps=_as_is),
        "unique_keys": None if keys is None else Jsonb(keys),
        "queue": s.queue, "job_class": s.job_class, "priority": s.priority,
        "run_at": s.run_at, "delay": s.delay_seconds, "max_retries": s.max_retries,
        "timeout": s.timeout_seconds, "idempotent": s.idempotent,
        "lease_name": s.lease_name, "schedule_name": s.schedule_name, "on_busy": s.on_busy,
        "lease_ttl": s.lease_ttl_seconds, "trace_context": s.trace_context,
        "pod_run": s.pod_run, "channel": channel,
    })
    ids: list[int | None] = found[0][0]
    return (yield from _with_duplicates(ids, keys or [None] * len(ids)))


def _with_duplicates(ids: Sequence[int | None],
                     keys: Sequence[str | None]) -> plans.Plan[list[EnqueueResult]]:
    """One result per row: its new id, or (None: its unique key conflicted) the id of
    the row holding the key, from this batch or stored before."""
    inserted = [EnqueueResult(id=id_, duplicate=False) for id_ in ids if id_ is not None]
    if len(inserted) == len(ids):
        return inserted
    missing = [k for id_, k in zip(ids, keys, strict=True) if id_ is None]
    # The existing row may have been committed by a concurrent enqueuer after this
    # statement's snapshot, so look it up afresh.
    found: dict[str, int] = dict(
        (yield from _rows("job_ids_by_unique_key", {"unique_keys": missing})))
    in_batch: dict[str, int] = {}
    for id_, key in zip(ids, keys, strict=True):
        if id_ is not None and key is not None:
            in_batch.setdefault(key, id_)
    results = []
    for id_, key in zip(ids, keys, strict=True):
        if id_ is not None:
            results.append(EnqueueResult(id=id_, duplicate=False))
            continue
        assert key is not None  # only a unique-key conflict inserts nothing
        existing = in_batch.get(key, found.get(key))
        if existing is None:
            raise RuntimeError(f"unique key {key!r} conflicted but no row holds it")
        results.append(EnqueueResult(id=existing, duplicate=True))
    return results


def _insert_unnest(specs: Sequence[JobSpec], *,
                   channel: str) -> plans.Plan[list[EnqueueResult]]:
    """Insert jobs in one statement; a unique-key duplicate returns the existing id."""
    params: dict[str, Any] = {
        "queues": [s.queue for s in specs],
        "classes": [s.job_class for s in specs],
        "datas": [_jsonb(s) for s in specs],
        "priorities": [s.priority for s in specs],
        "run_ats": [s.run_at for s in specs],
        "delays": [s.delay_seconds for s in specs],
        "max_retries": [s.max_retries for s in specs],
        "timeouts": [s.timeout_seconds for s in specs],
        "idempotents": [s.idempotent for s in specs],
        "unique_keys": [s.unique_key for s in specs],
        "lease_names": [s.lease_name for s in specs],
        "schedule_names": [s.schedule_name for s in specs],
        "on_busys": [s.on_busy for s in specs],
        "lease_ttls": [s.lease_ttl_seconds for s in specs],
        "trace_contexts": [s.trace_context for s in specs],
        "pod_runs": [s.pod_run for s in specs],
        "channel": channel,
    }
    rows = yield from _rows("job_insert_many", params)
    return (yield from _with_duplicates([r[1] for r in rows], [s.unique_key for s in specs]))


def insert_one_params(spec: JobSpec, *, channel: str) -> dict[str, Any]:
    """The parameters of job_insert_one and job_insert_one_visible for ``spec``."""
    return {
        "queue": spec.queue, "job_class": spec.job_class, "data": _jsonb(spec),
        "priority": spec.priority, "run_at": spec.run_at, "delay": spec.delay_seconds,
        "max_retries": spec.max_retries, "timeout": spec.timeout_seconds,
        "idempotent": spec.idempotent, "unique_key": spec.unique_key,
        "lease_name": spec.lease_name, "schedule_name": spec.schedule_name,
        "on_busy": spec.on_busy, "lease_ttl": spec.lease_ttl_seconds,
        "trace_context": spec.trace_context, "pod_run": spec.pod_run, "channel": channel,
    }


def _insert_one(spec: JobSpec, *, channel: str) -> plans.Plan[EnqueueResult]:
    # On a pooled connection the row is visible (and its NOTIFY out) before its WAL
    # flush, which the call still waits for (plans.Query.visible_before_flush): a
    # worker claims the job while the enqueue's durable commit is in progress.
    from jobwarden.db import plans  # see JobsTable._run

    found: list[Row] = yield plans.Query("job_insert_one",
                                         insert_one_params(spec, channel=channel),
                                         visible_before_flush=True)
    if found:
        return EnqueueResult(id=found[0][0], duplicate=False)
    assert spec.unique_key is not None  # only a unique-key conflict inserts nothing
    # The existing row may be newer than this statement's snapshot: look again.
    existing = yield from _rows("job_ids_by_unique_key", {"unique_keys": [spec.unique_key]})
    if not existing:
        raise RuntimeError(f"unique key {spec.unique_key!r} conflicted but no row holds it")
    return EnqueueResult(id=existing[0][1], duplicate=True)


def get_plan(job_id: int) -> plans.Plan[JobRecord | None]:
    found = yield from _rows("job_get", {"id": job_id})
    return _record(found[0]) if found else None


def delete_finished_plan(job_id: int) -> plans.Plan[JobStatus | None]:
    """Delete one finished job; the status it had, or None when it was not finished."""
    found = yield from _rows("job_delete_finished", {"id": job_id})
    return JobStatus(found[0][0]) if found else None


def recent_plan(*, status: JobStatus | None = None, queue: str | None = None,
                job_class: str | None = None, limit: int = 50) -> plans.Plan[list[JobRecord]]:
    found = yield from _rows("job_list", {
        "status": status.value if status else None, "queue": queue,
        "job_class": job_class, "limit": limit,
    })
    return [_record(r) for r in found]


def cancel_plan(job_id: int, *, done_channel: str) -> plans.Plan[JobStatus | None]:
    found = yield from _rows("job_cancel", {"id": job_id, "done_channel": done_channel})
    return JobStatus(found[0][0]) if found else None


def retry_plan(job_id: int) -> plans.Plan[bool]:
    found = yield from _rows("job_retry", {"id": job_id})
    return bool(found)


def purge_plan(*, statuses: Sequence[JobStatus], older_than_seconds: float,
               batch: int = 5000) -> plans.Plan[int]:
    """Delete in bounded batches so a large purge never holds a long transaction."""
    from jobwarden.db import plans  # see JobsTable._run

    total = 0
    while True:
        deleted: int = yield plans.Query("job_purge", {
            "statuses": [s.value for s in statuses], "older_than": older_than_seconds,
            "batch": batch,
        }, count=True)
        total += deleted
        if deleted < batch:
            return total


def scheduled_counts_plan() -> plans.Plan[dict[str, int]]:
    """Pending jobs not due yet, per queue (only queues that have some)."""
    found = yield from _rows("job_scheduled_counts")
    return {str(q): int(n) for q, n in found}


def stats_plan() -> plans.Plan[list[QueueStat]]:
    found = yield from _rows("job_stats")
    return [QueueStat(queue=q, status=JobStatus(s), count=n) for q, s, n in found]


def complete_tx_plan(*, job_id: int, claim_token: uuid.UUID, result: Any,
                     done_channel: str) -> plans.Plan[bool]:
    found = yield from _rows("job_complete_tx", {
        "id": job_id, "token": claim_token, "result": Jsonb(result),
        "done_channel": done_channel,
    })
    return bool(found)
