"""Rows and reports of the schedules table, as frozen dataclasses and named tuples.

Plain data only: the operator mirrors :class:`ScheduleRecord` into a
``JobSchedule``'s status, the CLI prints it, and neither needs the runner.

A schedule goes by one type per stage, each named for what it is:

* :class:`ScheduleDefinition`: what a writer decides, validated
  (``schedules.validation.validate``); the store writes it as a row.
* :class:`ScheduleRecord`: a stored row with the state the runner keeps.
* :class:`DueSchedule`: what a runner pass reads of a due, locked row.
* ``controller.specs.JobScheduleSpec``: a ``JobSchedule`` resource's spec, parsed;
  it validates into a :class:`ScheduleDefinition`.
* ``schedules.registry.CodeSchedule``: a definition declared in code, with its module.

One word per setting, the Python and database one; the ``JobSchedule`` CRD keeps
Kubernetes CronJob's words (its public API, and 0.1.0's columns are the same):

=====================================  =================================
Python (fields, arguments, columns)    CRD field (``JobSchedule.spec``)
=====================================  =================================
``overlap`` (:data:`Overlap`)          ``concurrencyPolicy``
``catch_up`` (:data:`CatchUp`)         ``catchUp``
``catch_up_window_seconds``            ``catchUpWindowSeconds``
``catch_up_max``                       ``catchUpMax``
``suspended``                          ``suspend``
=====================================  =================================
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

from jobwarden.structs.policies import CatchUp, OnBusy, Overlap

JsonValue = Any


def _jsonable(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime.datetime) else value


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleDefinition:
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
    catch_up: CatchUp
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: Overlap
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
    catch_up: CatchUp
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: Overlap
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
    #: The newest failure of a worker to import ``job_class`` (migration 0023): its
    #: error, the host and when; None when no worker ever failed to.
    class_error: str | None = None
    class_error_host: str | None = None
    class_error_at: datetime.datetime | None = None

    @property
    def class_unimportable(self) -> bool:
        """A worker failed to import the job class after the schedule's last success."""
        return self.class_error_at is not None and (
            self.last_success_at is None or self.class_error_at > self.last_success_at)

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
    #: CHECK-constrained to the policy words in the table, so typed as such here.
    catch_up: CatchUp
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: Overlap
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
    #: The operator of the cluster that wrote it has not confirmed it within its grace
    #: (migration 0022): the pass holds it (``owner_held_at``) instead of planning.
    owner_absent: bool = False


class JobRow(NamedTuple):
    """One slot's job as the runner copies it into ``jobs``, in the COPY's column order.

    A named tuple: COPY writes it as the tuple it is, and the runner reads its
    fields by name. ``data`` is the schedule's payload as JSON text; ``id`` is drawn
    from the jobs' sequence by the claim (None for a schedule's second slot until
    the runner draws more).
    """

    queue: str
    job_class: str
    data: str
    priority: int
    max_retries: int
    timeout_seconds: float
    idempotent: bool
    unique_key: str
    lease_name: str | None
    schedule_name: str
    on_busy: OnBusy | None
    pod_run: str | None
    id: int | None


#: Slots kept per schedule in its fate history (``schedule_slots``): what readers show
#: at most. The runner prunes a schedule's history back to this bound once its row
#: count (``schedules.slot_rows``) passes the bound plus :data:`SLOT_PRUNE_MARGIN`,
#: so one pass in every ``SLOT_PRUNE_MARGIN`` (one slot a pass) pays for a prune.
SLOT_HISTORY = 50
SLOT_PRUNE_MARGIN = 25


class Advance(NamedTuple):
    """One schedule's write-back in a pass (a row of ``schedule_runner_advance``).

    Its row (``ctid``), its new planning point, the newest slot that got a fate, the
    newest enqueued slot, the next slot, the fates counted, the newest enqueued
    slot's job (its id as drawn by the claim; its unique key, for the statement to
    look the id up when the job existed before the pass), the error and the
    history's row count after the pass (an upper bound).
    """

    name: str
    ctid: str
    planned_until: datetime.datetime | None
    last_slot: datetime.datetime | None
    last_enqueued_slot: datetime.datetime | None
    next_slot: datetime.datetime | None
    enqueued: int
    skipped: int
    missed: int
    replaced: int
    last_key: str | None
    #: The id of the newest enqueued slot's job (None: look it up by ``last_key``).
    last_job_id: int | None
    error: str | None
    slot_rows: int


class FateRow(NamedTuple):
    """One slot's recorded fate (a row of the history, ``schedule_slots``);
    ``job_id`` and ``unique_key`` name the job of an enqueued slot."""

    name: str
    slot: datetime.datetime
    fate: str
    unique_key: str | None
    job_id: int | None


class _Columns:
    """Rows of the named tuple :attr:`row` kept column by column: a list per field, of
    the field's name. A pass appends each value straight to the list a statement sends
    (typed arrays on the wire), so thousands of schedules build no row objects to
    transpose again (``python -m bench.schedules`` measures the client's CPU)."""

    row: ClassVar[type[Any]]

    def __len__(self) -> int:
        return len(getattr(self, self.row._fields[0]))

    def append(self, row: tuple[Any, ...]) -> None:
        """Add one row (a pass's rare rows: an error's write-back)."""
        for field, value in zip(self.row._fields, row, strict=True):
            getattr(self, field).append(value)

    def rows(self) -> list[Any]:
        """The rows, as :attr:`row` tuples (for readers and tests, not the pass)."""
        columns = [getattr(self, field) for field in self.row._fields]
        return [self.row._make(values) for values in zip(*columns, strict=True)]


@dataclasses.dataclass
class AdvanceColumns(_Columns):
    """The pass's :class:`Advance` rows (``schedule_runner_advance``), by column."""

    row: ClassVar[type[Advance]] = Advance

    name: list[str] = dataclasses.field(default_factory=list)
    ctid: list[str] = dataclasses.field(default_factory=list)
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
    last_job_id: list[int | None] = dataclasses.field(default_factory=list)
    error: list[str | None] = dataclasses.field(default_factory=list)
    slot_rows: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FateColumns(_Columns):
    """The pass's :class:`FateRow` rows (the history, ``schedule_slots``), by column."""

    row: ClassVar[type[FateRow]] = FateRow

    name: list[str] = dataclasses.field(default_factory=list)
    slot: list[datetime.datetime] = dataclasses.field(default_factory=list)
    fate: list[str] = dataclasses.field(default_factory=list)
    unique_key: list[str | None] = dataclasses.field(default_factory=list)
    job_id: list[int | None] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class PassWrite:
    """A runner pass's write-back: an :class:`Advance` per planned schedule, a
    :class:`FateRow` per slot that got a fate (both kept by column, as the statements
    send them), the schedules whose history is pruned back to its bound and those held
    (owner absent: suspended, not planned).
    """

    advances: AdvanceColumns = dataclasses.field(default_factory=AdvanceColumns)
    fates: FateColumns = dataclasses.field(default_factory=FateColumns)
    prune: list[str] = dataclasses.field(default_factory=list)
    #: Schedules whose owner is absent: suspended by the pass, not planned.
    hold_names: list[str] = dataclasses.field(default_factory=list)
    hold_ctids: list[str] = dataclasses.field(default_factory=list)

    def less_existing(self, rows: Sequence[JobRow], inserted: set[str]) -> int:
        """The jobs of ``rows`` whose unique key is not in ``inserted`` existed before
        the pass: they are not counted enqueued, and their ids are the existing jobs'
        (None: the statements look them up by unique key). Returns how many."""
        existing: dict[str, int] = {}
        for row in rows:
            if row.unique_key not in inserted:
                existing[row.schedule_name] = existing.get(row.schedule_name, 0) + 1
        if not existing:
            return 0
        keys = {row.unique_key for row in rows if row.unique_key not in inserted}
        a, f = self.advances, self.fates
        a.enqueued = [count - existing.get(name, 0)
                      for name, count in zip(a.name, a.enqueued, strict=True)]
        a.last_job_id = [None if key in keys else found
                         for key, found in zip(a.last_key, a.last_job_id, strict=True)]
        f.job_id = [None if key in keys else found
                    for key, found in zip(f.unique_key, f.job_id, strict=True)]
        return sum(existing.values())


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
    #: The ``pod_run`` of every job this pass enqueued (``JobSchedule/<ns>/<name>``): the
    #: operator wakes those resources at once to claim and start their pods. Not in JSON.
    pod_runs: set[str] = dataclasses.field(default_factory=set, compare=False)

    def add(self, other: RunReport) -> None:
        for field in ("checked", "enqueued", "duplicates", "skipped", "missed", "errors",
                      "replaced"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        self.more = other.more
        self.seconds += other.seconds
        self.pod_runs |= other.pod_runs

    def as_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "pod_runs"}


#: ``suspended_by`` of a schedule the runner suspended because the operator of the
#: cluster that wrote it has not confirmed it within its grace (migration 0022).
OWNER_ABSENT = "owner-absent"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleOwner:
    """An operator's confirmation of the schedule rows it wrote (``schedule_owners``).

    ``namespace`` '' covers every namespace (a cluster-wide operator). ``fresh``: renewed
    within ``grace_seconds`` on the database clock when read.
    """

    source: str
    namespace: str
    holder: str
    renewed_at: datetime.datetime
    grace_seconds: int
    fresh: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleHealth:
    """Per-schedule freshness, for the database-wide gauges the operator exports.

    ``seconds_since_success``: since a job of the schedule last completed; when
    none ever did, since the schedule was created (a schedule that never succeeds
    grows as stale as it is old), with ``ever_succeeded`` False.
    ``lag_seconds``: how far the next due slot is behind now (0 when on time or
    suspended). ``expression``: the stored expression (its period is computed by
    the schedules package). ``seconds_without_success``: how long the schedule has
    been active without a success -- since the latest of its last success, its
    creation and its last resume; 0 while suspended.
    """

    name: str
    seconds_since_success: float
    lag_seconds: float
    ever_succeeded: bool
    suspended: bool
    expression: str = ""
    seconds_without_success: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyncReport:
    """What syncing code-defined schedules into the table did."""

    upserted: list[str] = dataclasses.field(default_factory=list)
    suspended: list[str] = dataclasses.field(default_factory=list)
    #: Names defined in code whose row belongs to another source (never overwritten).
    clashes: list[str] = dataclasses.field(default_factory=list)
