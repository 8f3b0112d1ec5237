"""The application-facing API: enqueue, inspect, cancel, retry, purge, wait, stats.

``Client`` is the blocking shell and ``AsyncClient`` (``asyncclient.py``) the
asyncio one; both only drive the plans of ``operations.py``, which hold every
rule once. Every enqueue takes an optional ``conn=``: the application's own
connection or transaction, so the job commits (and wakes workers) exactly when
the application's transaction does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from jobwarden import errors, settings, textrules
from jobwarden.api import operations
from jobwarden.coordination import hosts as _hosts
from jobwarden.coordination import leases
from jobwarden.db import jobs as db_jobs
from jobwarden.db import plans
from jobwarden.db.database import Database
from jobwarden.jobs import definitions
from jobwarden.schedules.store import Schedules
from jobwarden.structs.jobs import AttemptRecord, EnqueueResult, JobRecord, JobSpec
from jobwarden.structs.queues import QueueSummary
from jobwarden.structs.search import BULK_STATUSES, BulkResult, JobFilter
from jobwarden.structs.states import JobStatus

JobRef = definitions.JobRef
T = TypeVar("T")
#: A psycopg ``Connection``/``Transaction``, a SQLAlchemy ``Session``/``Connection`` on
#: psycopg, or Django's connection (``Any`` here: only db/ may name psycopg's types).
CallerConnection = Any

#: Kept for callers of the old location; the rule lives in operations.
check_payload = operations.check_payload


def _queue_name(queue: str) -> str:
    """The queue of a pause: the rule enqueue applies (not blank, storable, 1-128)."""
    return textrules.check_name(queue, "queue", max_length=textrules.MAX_QUEUE_LENGTH)


def _resumable_queue_name(queue: str) -> str:
    """Resume takes any stored name, a blank one too (0.1.0 stored blank pauses)."""
    if not isinstance(queue, str) or not 1 <= len(queue) <= textrules.MAX_QUEUE_LENGTH:
        raise errors.InvalidInput(
            f"a queue name is 1 to {textrules.MAX_QUEUE_LENGTH} characters")
    return textrules.check_text(queue, "queue")

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

    #: ``client.lease(name, *, ttl, wait=0, on_busy="fail", ...)``: coordination/leases.py.
    lease = leases.lease

    def _run(self, plan: plans.Plan[T], conn: CallerConnection = None) -> T:
        joined = None if conn is None else plans.caller_connection(conn)
        return plans.run(self.db, plan, joined)

    # -- enqueue -------------------------------------------------------------------

    def spec(self, job: JobRef, data: Any = None, **options: Any) -> JobSpec:
        """Validate one enqueue request and build its row (nothing is written)."""
        return operations.spec(job, data, **options)

    def enqueue(self, job: JobRef, data: Any = None, *, conn: CallerConnection = None,
                **options: Any) -> EnqueueResult:
        """Enqueue one job; returns its id and whether the unique key made it a duplicate.

        With ``conn`` the insert joins that connection's transaction: the job exists,
        and workers are woken, exactly when the caller commits.
        """
        return self.enqueue_specs([operations.spec(job, data, **options)], conn=conn)[0]

    def enqueue_many(self, job: JobRef, datas: Iterable[Any], *,
                     unique_keys: Sequence[str | None] | None = None,
                     conn: CallerConnection = None, **options: Any) -> list[EnqueueResult]:
        """Enqueue one job per data item in a single statement (all validated first)."""
        batch = operations.batch_for_many(job, datas, unique_keys=unique_keys, **options)
        return self._run(operations.enqueue_batch(batch, schema=self.db.schema), conn)

    def enqueue_specs(self, specs: Sequence[JobSpec], *,
                      conn: CallerConnection = None) -> list[EnqueueResult]:
        """Insert prepared rows (mixed classes allowed) in one statement."""
        return self._run(operations.enqueue(specs, schema=self.db.schema), conn)

    # -- inspect, wait and manage --------------------------------------------------

    def job(self, job_id: int) -> JobRecord:
        return self._run(operations.job(job_id))

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        """The job's attempt history (the last 25 attempts), oldest first."""
        self.job(job_id)  # raises JobNotFound for a wrong id
        return self.db.jobs.attempts(job_id)

    def jobs(self, *, status: JobStatus | str | None = None, queue: str | None = None,
             job_class: str | None = None, limit: int = 50) -> list[JobRecord]:
        return self._run(operations.jobs(status=status, queue=queue, job_class=job_class,
                                         limit=limit))

    def wait(self, job_id: int, *, timeout: float | None) -> Any:
        """Block until the job finishes: its stored result, or its error raised.

        Raises :class:`jobwarden.JobFailed` (failed, cancelled, interrupted),
        :class:`jobwarden.WaitTimeout` after ``timeout`` seconds (``None``: no limit),
        :class:`jobwarden.JobNotFound`. Woken by NOTIFY, not by tight polling.
        """
        return self._run(operations.wait(job_id, timeout=timeout))

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
        return self._run(operations.cancel(job_id, schema=self.db.schema))

    def retry(self, job_id: int) -> bool:
        """Run a failed, interrupted or cancelled job again (one more attempt)."""
        return self._run(operations.retry(job_id))

    def running(self, *, limit: int = 20) -> list[JobRecord]:
        """The newest running jobs, at most ``limit``; cheap however big the table is."""
        return self.db.jobs.running(limit=limit)

    def delete(self, job_id: int) -> tuple[bool, JobStatus]:
        """Delete one finished job (completed, failed, interrupted or cancelled) with
        its attempt history.

        Returns ``(True, status it had)``, or ``(False, status)`` when the job is
        pending or running: a running job is never deleted (cancel it first).
        Raises JobNotFound when there is no such job.
        """
        return self._run(operations.delete(job_id))

    def purge(self, *, status: JobStatus | str | Iterable[JobStatus | str] = JobStatus.COMPLETED,
              older_than: float | datetime.timedelta = 0.0) -> int:
        """Delete finished jobs of the given status(es) finished more than ``older_than`` ago."""
        return self._run(operations.purge(status=status, older_than=older_than))

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
        return self.db.queues.resume(_resumable_queue_name(queue))

    def stats(self) -> dict[str, dict[str, int]]:
        """``{queue: {status: count}}`` with every status present (zeros included)."""
        return self._run(operations.stats())
