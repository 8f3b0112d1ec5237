"""What the client API does, written once for ``Client`` and ``AsyncClient``.

Each operation validates its arguments (plain Python, nothing stored on bad
input) and returns a *plan* (``db/plans.py``): the statements to run and what
their rows mean. ``Client`` drives plans with blocking I/O, ``AsyncClient`` with
asyncio; neither holds any rule of its own, so the two cannot disagree about
what a valid enqueue, a duplicate, a finished job or a timeout is.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from jobwarden import errors, textrules
from jobwarden.db import jobs as jobs_db
from jobwarden.db import plans
from jobwarden.db.database import channel_name
from jobwarden.jobs import definitions
from jobwarden.observability import metrics, tracing
from jobwarden.structs import podruns
from jobwarden.structs.jobs import EncodedData, EnqueueResult, JobBatch, JobRecord, JobSpec
from jobwarden.structs.states import TERMINAL, JobStatus

JobRef = definitions.JobRef

#: Without a notification, ``wait`` still looks at the row this often: LISTEN only
#: speeds waiting up (a pooler may not carry it), polling alone stays correct.
WAIT_POLL_SECONDS = 1.0
#: A waiter's mark (the ``job_waiters`` row that makes terminal writes NOTIFY) lasts
#: this long and is renewed when half of it is left.
WAIT_MARK_SECONDS = 60.0


#: ``json.dumps(..., allow_nan=False, ensure_ascii=False)`` without building an
#: encoder per call (a third of encoding a small payload); encoding keeps no state.
_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False)


def check_payload(data: Any) -> None:
    """Refuse data that would not round-trip through JSON, before anything is stored."""
    encode_payload(data)


def encode_payload(data: Any) -> bytes:
    """``data`` as the UTF-8 JSON text stored in ``jsonb``; InvalidPayload when it is
    not JSON or holds text PostgreSQL refuses (NUL, lone surrogates).

    One encoding serves both the check and the insert (``JobSpec.data_json``).
    ``ensure_ascii=False`` keeps the text short and leaves a lone surrogate raw, so
    the UTF-8 encoding itself finds it; a NUL is always escaped as ``\\u0000``. Only
    when either shows up (or a string holds a literal backslash-u0000) does the
    exact walk over every string and key run, to name the problem.
    """
    try:
        text = _JSON.encode(data)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidPayload(f"job data must be JSON-serialisable: {exc}") from exc
    try:
        encoded: bytes | None = text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        encoded = None
    if encoded is None or b"\\u0000" in encoded:
        try:
            textrules.check_json_text(data)
        except errors.InvalidInput as exc:
            raise errors.InvalidPayload(str(exc)) from None
        if encoded is None:  # unreachable unless the walk missed a container type
            raise errors.InvalidPayload("job data is not valid Unicode")
    return encoded


def encode_payloads(datas: list[Any]) -> bytes:
    """``datas`` as one JSON array (UTF-8), every item checked as :func:`encode_payload`
    checks one, in one ``json.dumps`` call instead of one per item.

    The batch's text carries the same evidence as each item's: a NUL shows as
    ``\\u0000``, a lone surrogate fails the UTF-8 encoding, anything not JSON
    fails the dump. On any of these the items are encoded one by one, which raises
    the very error the first bad item raises alone (or, when the evidence was only
    a string holding a literal backslash-u0000, or nesting one level too deep for
    the batch's list, joins the items' own texts).
    """
    try:
        encoded: bytes | None = _JSON.encode(datas).encode()
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        encoded = None
    if encoded is not None and b"\\u0000" not in encoded:
        return encoded
    return b"[" + b",".join([encode_payload(d) for d in datas]) + b"]"


@dataclasses.dataclass(frozen=True)
class _Request:
    """What every job of one enqueue call shares, validated once per call."""

    path: str
    cls: type[definitions.Job] | None
    fields: dict[str, Any]

    def spec(self, data: Any, unique_key: str | None) -> JobSpec:
        """One job's row: its data checked (typed data, function signature, JSON)."""
        if self.cls is not None:  # typed data and function signatures, wherever it imports
            data = definitions.encode_data(self.cls, data)
        data_json = EncodedData(data, encode_payload(data))
        if unique_key is not None:
            # Blank was refused before; NUL and lone surrogates now too (same rule).
            textrules.check_unique_key(unique_key)
        return JobSpec(job_class=self.path, data=data, unique_key=unique_key,
                       data_json=data_json, **self.fields)

    def batch(self, items: list[Any], keys: list[str | None] | None) -> JobBatch:
        """Every item's row (checked as :meth:`spec` checks one) as one :class:`JobBatch`.

        The checks run per column (data, then JSON, then keys) rather than per row;
        on a bad item the rows are checked again one by one, so the error raised is
        the one :meth:`spec` raises for the first bad row, as before.
        """
        try:
            datas = items
            if self.cls is not None:  # typed data and function signatures
                encode, cls = definitions.encode_data, self.cls
                datas = [encode(cls, d) for d in items]
            datas_json = encode_payloads(datas)
            if keys is not None:
                check = textrules.check_unique_key
                for key in keys:
                    if key is not None:
                        check(key)
                if all(k is None for k in keys):
                    keys = None
        except Exception:
            for d, k in zip(items, keys or [None] * len(items), strict=True):
                self.spec(d, k)  # raises the first bad row's own error
            raise
        return JobBatch(shared=JobSpec(job_class=self.path, **self.fields), datas=datas,
                        datas_json=datas_json, unique_keys=keys)


def _request(
    job: JobRef, *, queue: str | None = None, priority: int | None = None,
    run_at: datetime.datetime | None = None,
    delay: float | datetime.timedelta | None = None, max_retries: int | None = None,
    timeout: float | None = None, idempotent: bool | None = None, check: bool = True,
    pod_run: str | None = None,
) -> _Request:
    path, cls = definitions.reference(job, must_import=check)
    if run_at is not None and run_at.tzinfo is None:
        raise ValueError("run_at must be timezone-aware (e.g. datetime.now(UTC))")
    delay_seconds = delay.total_seconds() if isinstance(delay, datetime.timedelta) \
        else float(delay or 0.0)
    if not math.isfinite(delay_seconds) or delay_seconds < 0:
        raise ValueError("delay must be a non-negative number of seconds")
    if queue is not None:
        # "" is refused, not silently the class's queue: the rule schedules have.
        textrules.check_name(queue, "queue", max_length=textrules.MAX_QUEUE_LENGTH)
    if priority is not None and not isinstance(priority, bool):
        textrules.check_int32(int(priority), "priority")
    if pod_run is not None and (problem := podruns.pod_run_problem(pod_run)) is not None:
        raise errors.InvalidInput(f"pod_run {problem}")
    base: type[definitions.Job] = cls or definitions.Job
    resolved_timeout = float(timeout if timeout is not None else base.timeout)
    resolved_retries = int(max_retries if max_retries is not None else base.max_retries)
    if resolved_timeout <= 0 or not math.isfinite(resolved_timeout):
        raise ValueError("timeout must be a positive number of seconds")
    if resolved_retries < 0:
        raise ValueError("max_retries must not be negative")
    return _Request(path=path, cls=cls, fields={
        "queue": queue or base.queue,
        "priority": int(priority if priority is not None else base.priority),
        "run_at": run_at,
        "delay_seconds": delay_seconds,
        "max_retries": resolved_retries,
        "timeout_seconds": resolved_timeout,
        "idempotent": bool(idempotent if idempotent is not None
                           else base.idempotent or base.transactional),
        "pod_run": pod_run,
    })


def spec(job: JobRef, data: Any = None, *, unique_key: str | None = None,
         **options: Any) -> JobSpec:
    """Validate one enqueue request and build its row (nothing is written).

    Options: ``queue``, ``priority``, ``run_at``, ``delay``, ``max_retries``,
    ``timeout``, ``idempotent``, ``check`` (import a path to check its data),
    ``pod_run`` (``<Kind>/<namespace>/<name>``: the job is a pod run; no worker
    claims it, the operator runs it in a pod of that resource's template).
    """
    return _request(job, **options).spec(data, unique_key)


def specs_for_many(job: JobRef, datas: Iterable[Any], *,
                   unique_keys: Sequence[str | None] | None = None,
                   **options: Any) -> list[JobSpec]:
    """One validated row per data item; every item is checked before anything is stored.

    The job reference and the options are resolved and checked once for the batch,
    not once per item (they are the same for every row).
    """
    items = list(datas)
    keys = list(unique_keys) if unique_keys is not None else [None] * len(items)
    if len(keys) != len(items):
        raise ValueError("unique_keys must have one entry per data item")
    request = _request(job, **options)
    return [request.spec(d, k) for d, k in zip(items, keys, strict=True)]


def batch_for_many(job: JobRef, datas: Iterable[Any], *,
                   unique_keys: Sequence[str | None] | None = None,
                   **options: Any) -> JobBatch:
    """As :func:`specs_for_many`, as one :class:`JobBatch` (what ``enqueue_many`` sends)."""
    items = list(datas)
    keys = list(unique_keys) if unique_keys is not None else None
    if keys is not None and len(keys) != len(items):
        raise ValueError("unique_keys must have one entry per data item")
    return _request(job, **options).batch(items, keys)


def _traced(span: tracing.EnqueueSpan | None,
            plan: plans.Plan[list[EnqueueResult]]) -> plans.Plan[list[EnqueueResult]]:
    """Run an insert plan inside its enqueue span (when tracing is on): ended with the
    ids, or with the error, which is raised on."""
    try:
        results = yield from plan
    except BaseException as exc:
        if span is not None:
            span.failed(exc)
        raise
    if span is not None:
        span.done(results)
    return results


def enqueue(specs: Sequence[JobSpec], *, schema: str) -> plans.Plan[list[EnqueueResult]]:
    """Insert prepared rows (mixed classes allowed) in one statement.

    Counted as enqueued when the statement succeeds; inside a caller's transaction
    that is before the commit, so a rolled-back enqueue is still counted.
    """
    channel = channel_name(schema, jobs_db.JOBS_TOPIC)
    span = tracing.enqueue_span(specs)  # None unless OpenTelemetry is installed
    if span is not None:
        specs = span.stamped(specs)  # carrying the span's context into the rows
    results = yield from _traced(span, jobs_db.insert_plan(specs, channel=channel))
    if len(specs) == 1:  # the single enqueue: no Counter to build for one row
        if not results[0].duplicate:
            metrics.JOBS_ENQUEUED.labels(specs[0].queue, specs[0].job_class).inc()
        return results
    counts = collections.Counter((item.queue, item.job_class)
                                 for item, result in zip(specs, results, strict=True)
                                 if not result.duplicate)
    for (queue, job_class), count in counts.items():
        metrics.JOBS_ENQUEUED.labels(queue, job_class).inc(count)
    return results


def enqueue_batch(batch: JobBatch, *, schema: str) -> plans.Plan[list[EnqueueResult]]:
    """Insert the rows of one ``enqueue_many`` call in one statement (see :func:`enqueue`)."""
    channel = channel_name(schema, jobs_db.JOBS_TOPIC)
    span = tracing.batch_span(batch)  # None unless OpenTelemetry is installed
    if span is not None:
        batch = span.stamped_batch(batch)
    results = yield from _traced(span, jobs_db.insert_batch_plan(batch, channel=channel))
    count = sum(1 for r in results if not r.duplicate)
    if count:
        metrics.JOBS_ENQUEUED.labels(batch.shared.queue, batch.shared.job_class).inc(count)
    return results


def job(job_id: int) -> plans.Plan[JobRecord]:
    found = yield from jobs_db.get_plan(job_id)
    if found is None:
        raise errors.JobNotFound(f"no job with id {job_id}")
    return found


def jobs(*, status: JobStatus | str | None = None, queue: str | None = None,
         job_class: str | None = None, limit: int = 50) -> plans.Plan[list[JobRecord]]:
    wanted = JobStatus(status) if isinstance(status, str) else status
    return jobs_db.recent_plan(status=wanted, queue=queue, job_class=job_class, limit=limit)


def cancel(job_id: int, *, schema: str) -> plans.Plan[JobStatus]:
    """Cancel a pending job, or ask a running one to stop; the status after the call."""
    changed = yield from jobs_db.cancel_plan(job_id,
                                             done_channel=channel_name(schema, jobs_db.DONE_TOPIC))
    if changed is not None:
        return changed
    return (yield from job(job_id)).status


def retry(job_id: int) -> plans.Plan[bool]:
    """Run a failed, interrupted or cancelled job again (one more attempt)."""
    if (yield from jobs_db.retry_plan(job_id)):
        return True
    yield from job(job_id)  # raises JobNotFound for a wrong id
    return False


def delete(job_id: int) -> plans.Plan[tuple[bool, JobStatus]]:
    """Delete one finished job: (True, the status it had), or (False, the status that
    kept it: pending or processing); JobNotFound when there is no such job."""
    deleted = yield from jobs_db.delete_finished_plan(job_id)
    if deleted is not None:
        return True, deleted
    return False, (yield from job(job_id)).status


def purge(*, status: JobStatus | str | Iterable[JobStatus | str] = JobStatus.COMPLETED,
          older_than: float | datetime.timedelta = 0.0) -> plans.Plan[int]:
    raw = [status] if isinstance(status, (str, JobStatus)) else list(status)
    statuses = [JobStatus(s) for s in raw]
    for s in statuses:
        if s not in TERMINAL:
            raise ValueError(f"only finished jobs can be purged, not {s.value!r}")
    seconds = older_than.total_seconds() if isinstance(older_than, datetime.timedelta) \
        else float(older_than)
    if seconds < 0:
        raise ValueError("older_than must not be negative")
    return jobs_db.purge_plan(statuses=statuses, older_than_seconds=seconds)


def stats() -> plans.Plan[dict[str, dict[str, int]]]:
    """``{queue: {status: count}}`` with every status present (zeros included)."""
    out: dict[str, dict[str, int]] = {}
    for stat in (yield from jobs_db.stats_plan()):
        per = out.setdefault(stat.queue, {s.value: 0 for s in JobStatus})
        per[stat.status.value] = stat.count
    return out


def outcome(record: JobRecord) -> Any:
    """A finished job's stored result, or its error raised as :class:`errors.JobFailed`."""
    if record.status is JobStatus.COMPLETED:
        return record.result
    raise errors.JobFailed(job_id=record.id, status=record.status.value,
                           error=record.last_error)


def wait(job_id: int, *, timeout: float | None,
         poll: float = WAIT_POLL_SECONDS) -> plans.Plan[Any]:
    """Until the job finishes: its result, or its error raised; WaitTimeout after ``timeout``.

    Woken by the NOTIFY that a terminal write sends with the job's id when a waiter
    marked the job (``job_waiters``, migration 0024: a NOTIFY costs every LISTENing
    backend a transaction, so writes send none that nobody waits for); the row is
    also read every ``poll`` seconds, so a lost notification only costs latency.
    """
    if timeout is not None and (math.isnan(timeout) or timeout < 0):
        raise ValueError("timeout must be a non-negative number of seconds (or None)")
    wanted = str(job_id)
    yield plans.Listen(jobs_db.DONE_TOPIC)  # before the first read: nothing can slip between
    started: float = yield plans.Clock()
    deadline = math.inf if timeout is None else started + timeout
    renew_at = started
    while True:
        if (yield plans.Clock()) >= renew_at:
            # Marked (committed) before the read: a write that the read does not see
            # yet sees the mark, unless it was already under way (then the next read).
            marked_at: float = yield plans.Clock()
            yield plans.Query("job_wait_mark", {"id": job_id, "seconds": WAIT_MARK_SECONDS},
                              count=True)
            renew_at = marked_at + WAIT_MARK_SECONDS / 2
        record = yield from job(job_id)
        if record.status in TERMINAL:
            return outcome(record)
        next_read = (yield plans.Clock()) + poll
        while True:
            now: float = yield plans.Clock()
            if now >= deadline:
                raise errors.WaitTimeout(
                    f"job {job_id} did not finish within {timeout:g}s (status "
                    f"{record.status.value})", job_id=job_id)
            if now >= next_read:
                break
            payloads: list[str] = yield plans.AwaitNotify(min(deadline, next_read) - now)
            if any(wanted in p.split(",") for p in payloads):
                break
