"""Rows and reports of the schedules table, as frozen dataclasses.

Plain data only: the operator mirrors :class:`ScheduleRecord` into a
``JobSchedule``'s status, the CLI prints it, and neither needs the runner.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, NamedTuple

JsonValue = Any


def _jsonable(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime.datetime) else value


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """A validated schedule definition: everything a writer decides (nothing the runner does).

    ``expression`` is the canonical stored form (``CRON_TZ=<zone> <cron>`` or
    ``@every <interval>``); ``cron``/``interval``/``timezone`` are the same, split.
    ``None`` for queue, priority, timeout, retries or idempotent means "the job
    defaults" (the job class's own values when the class was given as an object).
    """

    name: str
    expression: str
    cron: str | None
    interval: str | None
    interval_seconds: int | None
    timezone: str
    job_class: str
    data: JsonValue
    queue: str | None
    priority: int | None
    timeout_seconds: float | None
    max_retries: int | None
    idempotent: bool | None
    catch_up: str
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: str
    suspended: bool
    source: str
    origin: str | None
    spec_hash: str
    #: ``<Kind>/<namespace>/<name>`` when each run is a pod of its own (copied onto
    #: every job the runner enqueues); None = runs on a WorkerPool.
    pod_run: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleRecord:
    """One schedule as stored, with the state the runner keeps.

    ``last_slot`` is the newest slot that got a recorded fate (enqueued, skipped or
    missed); every slot at or before ``planned_until`` has one and never runs again.
    ``next_slot`` is the first slot after that (None while suspended).
    ``last_job_status`` and ``last_success_at`` are read from the jobs table at
    query time (``last_success_at`` also survives a purge of old jobs).
    """

    name: str
    cron: str | None
    interval: str | None
    timezone: str
    job_class: str
    data: JsonValue
    queue: str | None
    priority: int | None
    timeout_seconds: float | None
    max_retries: int | None
    catch_up: str
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: str
    suspended: bool
    source: str
    spec_hash: str
    last_slot: datetime.datetime | None
    next_slot: datetime.datetime | None
    enqueued_count: int
    skipped_count: int
    missed_count: int
    last_job_id: int | None
    last_job_status: str | None
    last_success_at: datetime.datetime | None
    created_at: datetime.datetime
    updated_at: datetime.datetime
    # Beyond the operator contract: useful to people and to conflict reports.
    expression: str = ""
    idempotent: bool | None = None
    suspended_by: str | None = None
    spec_suspended: bool = False
    origin: str | None = None
    planned_until: datetime.datetime | None = None
    last_enqueued_slot: datetime.datetime | None = None
    last_job_finished_at: datetime.datetime | None = None
    last_error: str | None = None
    pod_run: str | None = None
    #: Later fates of enqueued slots (see :data:`SLOT_FATES`).
    replaced_count: int = 0
    dropped_count: int = 0
    deferred_count: int = 0

    def fate_counts(self) -> dict[str, int]:
        """Every slot fate with its count, in :data:`SLOT_FATES` order."""
        return {fate: int(getattr(self, f"{fate}_count")) for fate in SLOT_FATES}

    def as_json(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


class DueSchedule(NamedTuple):
    """What the runner reads of a due schedule (row locked for the pass).

    A named tuple, not a dataclass: a pass builds one per due schedule straight
    from the claim's row (``DueSchedule._make(row)``, the fields in the claim's
    column order), which costs a fifth of a frozen dataclass's keyword init.
    """

    name: str
    expression: str
    job_class: str
    #: The stored payload as JSON text: copied onto the slots' jobs as is.
    data: str
    queue: str | None
    priority: int | None
    timeout_seconds: float | None
    max_retries: int | None
    idempotent: bool | None
    catch_up: str
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: str
    planned_until: datetime.datetime
    last_job_id: int | None
    #: Status of the job ``last_job_id`` names (None: none, or purged; not read for an
    #: Allow schedule, whose slots never depend on it).
    last_job_status: str | None
    #: The due slot as stored (the page key, with the name).
    next_slot: datetime.datetime
    #: Copied onto every job enqueued for the schedule (None = a pool run).
    pod_run: str | None = None
    #: The locked row's tuple id, how the pass's write-back finds it again.
    ctid: str = ""
    #: An upper bound of the schedule's history rows (``schedules.slot_rows``).
    slot_rows: int = 0
    #: A job id drawn for the schedule by the claim: its first slot's job of the pass
    #: takes it (the write-back and the history then name the job without a lookup).
    job_id: int | None = None


#: One slot's job as the runner copies it into ``jobs``: queue, job_class, data (JSON
#: text), priority, max_retries, timeout_seconds, idempotent, unique_key, lease_name,
#: schedule_name, on_busy, pod_run, id (drawn from the jobs' sequence by the claim; None
#: for a schedule's second slot until the runner draws more).
JobRow = tuple[str, str, str, int, int, float, bool, str, str | None, str, str | None,
               str | None, int | None]

#: Slots kept per schedule in its fate history (``schedule_slots``): what readers show
#: at most. The runner prunes a schedule's history back to this bound once its row
#: count (``schedules.slot_rows``) passes the bound plus :data:`SLOT_PRUNE_MARGIN`,
#: so one pass in every ``SLOT_PRUNE_MARGIN`` (one slot a pass) pays for a prune.
SLOT_HISTORY = 50
SLOT_PRUNE_MARGIN = 25


@dataclasses.dataclass(kw_only=True)
class PassWrite:
    """A runner pass's write-back, column by column (typed arrays on the wire).

    The first lists hold one entry per schedule of the pass: its row, its new planning
    point, the newest slot that got a fate, the newest enqueued slot, the next
    slot, the fates counted, the newest enqueued slot's job (its id as drawn by the
    claim; its unique key, for the statement to look the id up when the job existed
    before the pass), the error and the history's row count. The ``fate_*`` lists
    hold one entry per slot that got a fate (the history; ``fate_job_ids`` and
    ``fate_keys`` name the job of an enqueued slot).
    """

    names: list[str] = dataclasses.field(default_factory=list)
    ctids: list[str] = dataclasses.field(default_factory=list)
    planned_until: list[datetime.datetime | None] = dataclasses.field(default_factory=list)
    last_slot: list[datetime.datetime | None] = dataclasses.field(default_factory=list)
    last_enqueued_slot: list[datetime.datetime | None] = dataclasses.field(
        default_factory=list)
    next_slot: list[datetime.datetime | None] = dataclasses.field(default_factory=list)
    enqueued: list[int] = dataclasses.field(default_factory=list)
    skipped: list[int] = dataclasses.field(default_factory=list)
    missed: list[int] = dataclasses.field(default_factory=list)
    replaced: list[int] = dataclasses.field(default_factory=list)
    last_key: list[str | None] = dataclasses.field(default_factory=list)
    #: The id of the newest enqueued slot's job (None: look it up by ``last_key``).
    last_job_ids: list[int | None] = dataclasses.field(default_factory=list)
    error: list[str | None] = dataclasses.field(default_factory=list)
    #: The schedule's history rows after the pass (an upper bound), and whether the
    #: pass prunes its history back to the bound.
    slot_rows: list[int] = dataclasses.field(default_factory=list)
    prune: list[str] = dataclasses.field(default_factory=list)
    fate_names: list[str] = dataclasses.field(default_factory=list)
    fate_slots: list[datetime.datetime | None] = dataclasses.field(default_factory=list)
    fates: list[str] = dataclasses.field(default_factory=list)
    fate_keys: list[str | None] = dataclasses.field(default_factory=list)
    fate_job_ids: list[int | None] = dataclasses.field(default_factory=list)

    def forget_ids(self, keys: set[str]) -> None:
        """The jobs of ``keys`` were not inserted by this pass (they existed): their
        ids are the existing jobs', for the statements to look up by unique key."""
        self.last_job_ids = [None if key in keys else found
                             for key, found in zip(self.last_key, self.last_job_ids,
                                                   strict=True)]
        self.fate_job_ids = [None if key in keys else found
                             for key, found in zip(self.fate_keys, self.fate_job_ids,
                                                   strict=True)]


#: Every fate a schedule slot can have, in the order people read them.
#: ``enqueued``, ``skipped`` (overlap policy) and ``missed`` (catch-up, suspension)
#: are decided by the runner; ``replaced`` (a Replace slot cancelled the run),
#: ``dropped`` (a Forbid run found the schedule's lease busy) and ``deferred`` (the
#: run found a lease busy and waits; its first deferral) happen later to an
#: enqueued slot, so those slots count as enqueued too.
SLOT_FATES: tuple[str, ...] = ("enqueued", "skipped", "missed", "replaced", "dropped",
                               "deferred")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlotFate:
    """One slot of a schedule's bounded history, with its fate (newest fate wins)."""

    schedule: str
    slot: datetime.datetime
    fate: str
    job_id: int | None = None
    #: The run's status now (None: no job, or purged); read, not stored.
    job_status: str | None = None
    recorded_at: datetime.datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(kw_only=True)
class RunReport:
    """What one ``enqueue_due`` call did. Mutable while the pass runs; read afterwards.

    ``checked`` schedules were due and planned; ``enqueued`` slots became new jobs;
    ``duplicates`` slots already had their job (the unique key); ``skipped`` slots
    were not run because of the overlap policy; ``missed`` slots were not run
    because of the catch-up rule; ``errors`` counts schedules (or whole batches)
    that failed, each logged. ``replaced`` counts previous runs cancelled (or asked
    to stop) by the Replace policy. ``more`` is True when ``limit`` stopped the pass.
    """

    checked: int = 0
    enqueued: int = 0
    duplicates: int = 0
    skipped: int = 0
    missed: int = 0
    errors: int = 0
    replaced: int = 0
    more: bool = False
    seconds: float = 0.0

    def add(self, other: RunReport) -> None:
        for field in ("checked", "enqueued", "duplicates", "skipped", "missed", "errors",
                      "replaced"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        self.more = other.more
        self.seconds += other.seconds

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleHealth:
    """Per-schedule freshness, for the database-wide gauges the operator exports.

    ``seconds_since_success``: since a job of the schedule last completed; when
    none ever did, since the schedule was created (a schedule that never succeeds
    grows as stale as it is old), with ``ever_succeeded`` False.
    ``lag_seconds``: how far the next due slot is behind now (0 when on time or
    suspended).
    """

    name: str
    seconds_since_success: float
    lag_seconds: float
    ever_succeeded: bool
    suspended: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyncReport:
    """What syncing code-defined schedules into the table did."""

    upserted: list[str] = dataclasses.field(default_factory=list)
    suspended: list[str] = dataclasses.field(default_factory=list)
    #: Names defined in code whose row belongs to another source (never overwritten).
    clashes: list[str] = dataclasses.field(default_factory=list)
