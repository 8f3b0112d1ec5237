"""The application-facing API: enqueue, inspect, cancel, retry, purge, stats.

Synchronous on purpose: it is called from web requests, scripts and the CLI,
and one implementation (not mirrored sync and async APIs) keeps it small. Async
code can call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from jobwarden import definitions, errors, leases, metrics, settings
from jobwarden import hosts as _hosts
from jobwarden.db import jobs as db_jobs
from jobwarden.db.database import Database
from jobwarden.schedules.store import Schedules
from jobwarden.structs.jobs import AttemptRecord, EnqueueResult, JobRecord, JobSpec
from jobwarden.structs.queues import QueueSummary
from jobwarden.structs.search import BULK_STATUSES, BulkResult, JobFilter
from jobwarden.structs.states import TERMINAL, JobStatus

JobRef = definitions.JobRef


def check_payload(data: Any) -> None:
    """Refuse data that would not round-trip through JSON, before anything is stored."""
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidPayload(f"job data must be JSON-serialisable: {exc}") from exc


def _queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not 1 <= len(queue) <= 128:
        raise ValueError("a queue name is 1 to 128 characters")
    return queue


class Client:
    """A connection pool to one Jobwarden schema plus the operations on it."""

    def __init__(self, dsn: str | None = None, *, schema: str | None = None,
                 max_connections: int = 4, database: Database | None = None,
                 owns_database: bool = False) -> None:
        if database is not None:
            self.db = database
            self._owns_db = owns_database
        else:
            resolved = dsn or settings.env_dsn()
            if not resolved:
                raise errors.ConfigurationError(
                    "no database DSN: pass Client(dsn=...) or set JOBWARDEN_DSN"
                )
            self.db = Database(resolved, schema=schema or settings.env_schema(),
                               min_size=1, max_size=max_connections)
            self._owns_db = True

    @property
    def hosts(self) -> _hosts.Hosts:
        """Drain, resume and inspect hosts (the host registry)."""
        return _hosts.Hosts(self.db)

    @property
    def schedules(self) -> Schedules:
        """Define, suspend, inspect and run recurring schedules (jobwarden.schedules.store)."""
        return Schedules(self.db)

    def close(self) -> None:
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    #: ``client.lease(name, *, ttl, wait=0, on_busy="fail", ...)``: see jobwarden.leases.
    lease = leases.lease

    # -- enqueue -------------------------------------------------------------------

    def spec(
        self, job: JobRef, data: Any = None, *, queue: str | None = None,
        priority: int | None = None, run_at: datetime.datetime | None = None,
        delay: float | datetime.timedelta | None = None, unique_key: str | None = None,
        max_retries: int | None = None, timeout: float | None = None,
        idempotent: bool | None = None, check: bool = True,
    ) -> JobSpec:
        """Validate one enqueue request and build its row (nothing is written)."""
        path, cls = definitions.reference(job, must_import=check)
        check_payload(data)
        if run_at is not None and run_at.tzinfo is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(UTC))")
        delay_seconds = delay.total_seconds() if isinstance(delay, datetime.timedelta) \
            else float(delay or 0.0)
        if not math.isfinite(delay_seconds) or delay_seconds < 0:
            raise ValueError("delay must be a non-negative number of seconds")
        if unique_key is not None and not unique_key.strip():
            raise ValueError("unique_key must not be blank")
        base: type[definitions.Job] = cls or definitions.Job
        resolved_timeout = float(timeout if timeout is not None else base.timeout)
        resolved_retries = int(max_retries if max_retries is not None else base.max_retries)
        if resolved_timeout <= 0 or not math.isfinite(resolved_timeout):
            raise ValueError("timeout must be a positive number of seconds")
        if resolved_retries < 0:
            raise ValueError("max_retries must not be negative")
        return JobSpec(
            job_class=path,
            data=data,
            queue=queue or base.queue,
            priority=int(priority if priority is not None else base.priority),
            run_at=run_at,
            delay_seconds=delay_seconds,
            max_retries=resolved_retries,
            timeout_seconds=resolved_timeout,
            idempotent=bool(idempotent if idempotent is not None else base.idempotent),
            unique_key=unique_key,
        )

    def enqueue(self, job: JobRef, data: Any = None, **options: Any) -> EnqueueResult:
        """Enqueue one job; returns its id and whether the unique key made it a duplicate."""
        return self.enqueue_specs([self.spec(job, data, **options)])[0]

    def enqueue_many(self, job: JobRef, datas: Iterable[Any], *,
                     unique_keys: Sequence[str | None] | None = None,
                     **options: Any) -> list[EnqueueResult]:
        """Enqueue one job per data item in a single round trip."""
        items = list(datas)
        keys = list(unique_keys) if unique_keys is not None else [None] * len(items)
        if len(keys) != len(items):
            raise ValueError("unique_keys must have one entry per data item")
        specs = [self.spec(job, d, unique_key=k, **options) for d, k in zip(items, keys,
                                                                             strict=True)]
        return self.enqueue_specs(specs)

    def enqueue_specs(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Insert prepared rows (mixed classes allowed) in one round trip."""
        results = self.db.jobs.insert_many(specs)
        for spec, result in zip(specs, results, strict=True):
            if not result.duplicate:
                metrics.JOBS_ENQUEUED.labels(spec.queue, spec.job_class).inc()
        return results

    # -- inspect and manage --------------------------------------------------------

    def job(self, job_id: int) -> JobRecord:
        found = self.db.jobs.get(job_id)
        if found is None:
            raise errors.JobNotFound(f"no job with id {job_id}")
        return found

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        """The job's attempt history (the last 25 attempts), oldest first."""
        self.job(job_id)  # raises JobNotFound for a wrong id
        return self.db.jobs.attempts(job_id)

    def jobs(self, *, status: JobStatus | str | None = None, queue: str | None = None,
             job_class: str | None = None, limit: int = 50) -> list[JobRecord]:
        wanted = JobStatus(status) if isinstance(status, str) else status
        return self.db.jobs.recent(status=wanted, queue=queue, job_class=job_class, limit=limit)

    def search(self, where: JobFilter | None = None, *, before: int | None = None,
               limit: int = 50) -> list[JobRecord]:
        """Matching jobs, newest first, one page at a time (keyset: pass the last id)."""
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        return self.db.jobs.search(where or JobFilter(), before=before, limit=limit)

    def bulk(self, action: str, where: JobFilter, *, dry_run: bool = False,
             count_cap: int = 10_000_000) -> BulkResult:
        """Retry, cancel or purge every job matching ``where``.

        ``retry`` touches failed, interrupted and cancelled jobs; ``cancel`` pending
        (cancelled at once) and processing ones (asked to stop); ``purge`` finished
        ones. A dry run only counts what would change (at most ``count_cap``).
        """
        if action not in BULK_STATUSES:
            raise ValueError(f"unknown bulk action {action!r}: use retry, cancel or purge")
        if dry_run:
            count = db_jobs.bulk_count(self.db.jobs, action, where, cap=count_cap)
        else:
            count = self.db.jobs.bulk(action, where)
        return BulkResult(action=action, count=count, dry_run=dry_run)

    def cancel(self, job_id: int) -> JobStatus:
        """Cancel a pending job, or ask a running one to stop (its next heartbeat raises).

        Returns the status after the call; a finished job is left as it is.
        """
        changed = self.db.jobs.cancel(job_id)
        if changed is not None:
            return changed
        return self.job(job_id).status

    def retry(self, job_id: int) -> bool:
        """Run a failed, interrupted or cancelled job again (one more attempt)."""
        if self.db.jobs.retry(job_id):
            return True
        self.job(job_id)  # raises JobNotFound for a wrong id
        return False

    def purge(self, *, status: JobStatus | str | Iterable[JobStatus | str] = JobStatus.COMPLETED,
              older_than: float | datetime.timedelta = 0.0) -> int:
        """Delete finished jobs of the given status(es) finished more than ``older_than`` ago."""
        raw = [status] if isinstance(status, (str, JobStatus)) else list(status)
        statuses = [JobStatus(s) for s in raw]
        for s in statuses:
            if s not in TERMINAL:
                raise ValueError(f"only finished jobs can be purged, not {s.value!r}")
        seconds = older_than.total_seconds() if isinstance(older_than, datetime.timedelta) \
            else float(older_than)
        if seconds < 0:
            raise ValueError("older_than must not be negative")
        return self.db.jobs.purge(statuses=statuses, older_than_seconds=seconds)

    # -- queues ----------------------------------------------------------------------

    def queues(self, *, window_seconds: float = 300.0) -> list[QueueSummary]:
        """Per-queue depth, oldest due age, running count and throughput over the window."""
        if window_seconds <= 0:
            raise ValueError("window_seconds must be positive")
        return self.db.queues.summaries(window_seconds=window_seconds)

    def pause_queue(self, queue: str, *, by: str | None = None) -> None:
        """Workers stop claiming from ``queue``; jobs already running finish normally."""
        self.db.queues.pause(_queue_name(queue), by=by)

    def resume_queue(self, queue: str) -> bool:
        """Undo :meth:`pause_queue`; False when the queue was not paused."""
        return self.db.queues.resume(_queue_name(queue))

    def stats(self) -> dict[str, dict[str, int]]:
        """``{queue: {status: count}}`` with every status present (zeros included)."""
        out: dict[str, dict[str, int]] = {}
        for stat in self.db.jobs.stats():
            per = out.setdefault(stat.queue, {s.value: 0 for s in JobStatus})
            per[stat.status.value] = stat.count
        return out
