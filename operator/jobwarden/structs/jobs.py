"""Rows and requests of the jobs table, as frozen dataclasses."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from typing import Any

from jobwarden.structs.policies import OnBusy
from jobwarden.structs.states import JobStatus

JsonValue = Any


@dataclasses.dataclass(frozen=True, eq=False)
class EncodedData:
    """A payload's JSON (UTF-8) and the very object it was encoded from."""

    source: object
    text: bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Everything needed to insert one job row."""

    job_class: str
    data: JsonValue = None
    queue: str = "default"
    priority: int = 0
    run_at: datetime.datetime | None = None
    delay_seconds: float = 0.0
    max_retries: int = 3
    timeout_seconds: float = 300.0
    idempotent: bool = True
    unique_key: str | None = None
    #: A lease named by the enqueuer (an ExclusiveJob's key, a Forbid schedule):
    #: taken for this run instead of the class's own lease.
    lease_name: str | None = None
    schedule_name: str | None = None
    #: With ``lease_name``: what a busy lease does (None = the class's ``on_busy``).
    on_busy: OnBusy | None = None
    #: With ``lease_name``: the lease's lifetime without renewal (None = default window).
    lease_ttl_seconds: float | None = None
    #: The enqueuer's trace context (JSON of W3C headers) when OpenTelemetry is on.
    trace_context: str | None = None
    #: ``<Kind>/<namespace>/<name>`` of the resource whose pod template runs this job
    #: (docs/podruns.md): no worker claims it, the operator does, for a pod of its own.
    #: None = a pool run.
    pod_run: str | None = None
    #: ``data`` already encoded as the JSON to store, when validating it encoded it
    #: anyway (``operations.spec``): sent as is, so a payload is not encoded twice.
    #: It names the object it encodes, so a copy whose ``data`` was replaced
    #: (``dataclasses.replace(s, data=d)``) is encoded afresh, never sent stale.
    data_json: EncodedData | None = dataclasses.field(default=None, compare=False, repr=False)

    def encoded_data(self) -> bytes | None:
        """``data``'s JSON when it was encoded for exactly this object, else None."""
        if self.data_json is not None and self.data_json.source is self.data:
            return self.data_json.text
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobBatch:
    """The rows of one ``enqueue_many`` call: alike in every column but data and key.

    Why not a ``JobSpec`` per row: the rows share the class, queue and every option,
    so the insert sends those once, and the per-row columns as one JSON array each
    (``datas_json``, encoded by one ``json.dumps`` of the whole batch). Building a
    spec per row and sending sixteen columns per row was most of a batch's cost.
    """

    #: The columns every row shares (its ``data`` and ``unique_key`` are not used).
    shared: JobSpec
    #: Each row's data as stored (after the job's type or signature check).
    datas: list[JsonValue]
    #: ``datas`` as one JSON array (UTF-8), checked as ``encode_payload`` checks one.
    datas_json: bytes
    #: Each row's unique key (None: that row has none); None when no row has one.
    unique_keys: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.datas)

    def specs(self) -> list[JobSpec]:
        """The same rows as one ``JobSpec`` each (for the general insert path)."""
        keys = self.unique_keys or [None] * len(self.datas)
        return [dataclasses.replace(self.shared, data=data, unique_key=key, data_json=None)
                for data, key in zip(self.datas, keys, strict=True)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnqueueResult:
    id: int
    duplicate: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimedJob:
    """One claimed attempt: what the worker needs to run it and to fence its writes."""

    id: int
    queue: str
    job_class: str
    data: JsonValue
    priority: int
    attempt: int
    max_retries: int
    timeout_seconds: float
    idempotent: bool
    claim_token: uuid.UUID
    lease_name: str | None
    schedule_name: str | None
    queue_wait_seconds: float
    on_busy: OnBusy | None = None
    lease_ttl_seconds: float | None = None
    #: The enqueuer's trace context (see JobSpec), for the attempt's span.
    trace_context: str | None = None

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt > self.max_retries


@dataclasses.dataclass(frozen=True, kw_only=True)
class Completion:
    """A successful attempt waiting to be written (batched)."""

    id: int
    claim_token: uuid.UUID
    result: JsonValue
    lease_lost: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Failure:
    """A failed attempt: retried after ``retry_in_seconds`` unless final."""

    id: int
    claim_token: uuid.UUID
    error: str
    retryable: bool
    retry_in_seconds: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeartbeatAck:
    """The claims a heartbeat still owns, and which of them were asked to cancel."""

    alive: frozenset[int]
    cancel_requested: frozenset[int]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReapedJob:
    id: int
    queue: str
    job_class: str
    status: JobStatus
    claimed_by: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobRecord:
    """A job as ``client.job(id)`` and ``jobwarden jobs show`` present it."""

    id: int
    queue: str
    job_class: str
    data: JsonValue
    priority: int
    status: JobStatus
    run_at: datetime.datetime
    attempts: int
    max_retries: int
    timeout_seconds: float
    idempotent: bool
    unique_key: str | None
    lease_name: str | None
    claimed_by: str | None
    claimed_at: datetime.datetime | None
    heartbeat_at: datetime.datetime | None
    cancel_requested: bool
    deferrals: int
    lease_lost: bool
    lease_token: int | None
    result: JsonValue
    last_error: str | None
    schedule_name: str | None
    created_at: datetime.datetime
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None
    #: The enqueuer's trace context (JSON of W3C ``traceparent``/``tracestate``
    #: headers) when OpenTelemetry was on at enqueue; None otherwise.
    trace_context: str | None = None
    #: The resource whose pod runs this job (None = a pool run); see JobSpec.pod_run.
    pod_run: str | None = None

    @property
    def trace_id(self) -> str | None:
        """The trace id (32 hex digits) of ``trace_context``'s ``traceparent``, if any.

        Shown next to the raw context so a tracing UI can be searched for it
        without reading W3C header syntax.
        """
        if not self.trace_context:
            return None
        try:
            headers = json.loads(self.trace_context)
        except ValueError:
            return None
        parent = headers.get("traceparent") if isinstance(headers, dict) else None
        parts = parent.split("-") if isinstance(parent, str) else []
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, datetime.datetime):
                value = value.isoformat()
            elif isinstance(value, JobStatus):
                value = value.value
            out[field.name] = value
        if self.trace_context:
            out["trace_id"] = self.trace_id
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueStat:
    queue: str
    status: JobStatus
    count: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptRecord:
    """One finished attempt of a job, as kept in its bounded history."""

    attempt: int
    started_at: datetime.datetime | None
    finished_at: datetime.datetime
    host: str | None
    #: completed | failed | cancelled | reaped
    outcome: str
    #: The job's status right after the attempt (pending: it will be retried).
    status_after: str
    error: str | None
    traceback: str | None

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def as_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat(),
            "duration_seconds": self.duration_seconds, "host": self.host,
            "outcome": self.outcome, "status_after": self.status_after, "error": self.error,
            "traceback": self.traceback,
        }
