"""Retention: finished jobs are deleted automatically, by one process per database.

Why: a job table only grows. Each job leaves its finished row behind, and
every row rewritten by a claim and an outcome leaves dead tuples for
autovacuum; a table of millions of finished rows makes every vacuum longer and
every purge a big one (issue 16, docs/benchmarks.md "How cost grows"). So the
rows of each finished status are kept for an age and/or a count
(:class:`~jobwarden.structs.maintenance.RetentionPolicy`, from
``JOBWARDEN_RETENTION``) and deleted behind them.

How:

- **One per database.** Workers (:mod:`jobwarden.extensions.retention`) and the operator
  (``controller/periodic.py``) all offer to run the task;
  before each pass a process must hold the database lease
  ``maintenance:retention`` (:class:`~jobwarden.maintenance.looping.LoopLease`, the holder
  the gauges and the operator's loops use), so one
  process deletes at a time and a dead holder is replaced when its lease
  lapses. The policy of the process holding the lease applies: give every
  process of a database the same ``JOBWARDEN_RETENTION``.
- **Short transactions.** A pass computes, per status, the newest
  ``finished_at`` its rule deletes (once: a count rule does not re-scan the
  rows it keeps), then deletes in batches of ``batch`` rows, each its own
  transaction with ``FOR UPDATE SKIP LOCKED``: it never waits behind a manual
  retry, ``jobwarden jobs purge`` or a schedule's history trim, and they never
  wait behind it for longer than one batch. A pass stops after ``budget``
  seconds (the lease outlives it) and the next pass goes on where it stopped.
- **History limits win.** Jobs of a schedule with a CronJob history limit
  (``successfulJobsHistoryLimit`` / ``failedJobsHistoryLimit``) for their
  status group are left to that limit, which the operator applies; retention
  does not also delete them by age.
- **Counted.** Deleted rows are counted in
  ``jobwarden_retention_deleted_total{status}`` by the process that deleted
  them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.maintenance.looping import LoopLease, PeriodicTask
from jobwarden.observability import metrics
from jobwarden.settings import env_number
from jobwarden.structs.maintenance import RetentionPolicy

if TYPE_CHECKING:
    from jobwarden.db.database import Database

__all__ = ["LEASE_NAME", "Retention", "RetentionSettings", "RetentionTask"]

logger = logging.getLogger("jobwarden.retention")

#: The one lease, shared by workers and operators, that makes the task one per database.
LEASE_NAME = "maintenance:retention"
#: The most passes a retention holder skips after passes that deleted nothing.
QUIET_SKIP_MAX = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetentionSettings:
    """The retention task's policy and pace (environment: docs/operations.md)."""

    policy: RetentionPolicy = dataclasses.field(default_factory=RetentionPolicy)
    #: Seconds between passes (``JOBWARDEN_RETENTION_INTERVAL``, 0 = this process
    #: never runs retention).
    interval: float = 60.0
    #: Rows per delete transaction (``JOBWARDEN_RETENTION_BATCH``).
    batch: int = 1000
    #: A pass stops after this long; the next one goes on.
    budget: float = 30.0

    @property
    def enabled(self) -> bool:
        return self.interval > 0 and self.policy.enabled

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetentionSettings:
        env = os.environ if env is None else env
        interval = env_number("JOBWARDEN_RETENTION_INTERVAL", 60.0, allow_zero=True, env=env)
        try:
            policy = RetentionPolicy.parse(env.get("JOBWARDEN_RETENTION", ""))
        except ValueError as exc:
            raise errors.ConfigurationError(str(exc)) from None
        return cls(policy=policy, interval=interval,
                   batch=int(env_number("JOBWARDEN_RETENTION_BATCH", 1000, integer=True,
                                        env=env)),
                   budget=max(1.0, min(30.0, interval / 2)) if interval > 0 else 30.0)


class Retention:
    """One pass of the retention rules over the jobs table (no lease: see the task)."""

    def __init__(self, db: Database, settings: RetentionSettings) -> None:
        self.db = db
        self.settings = settings

    def run_pass(self) -> dict[str, int]:
        """Delete what the rules allow, within the pass's budget; rows deleted per status."""
        deadline = time.monotonic() + self.settings.budget
        deleted: dict[str, int] = {}
        for rule in self.settings.policy.rules:
            if not rule.active or time.monotonic() >= deadline:
                continue
            through = self.db.maintenance.retention_bound(
                rule.status, max_age=rule.max_age, max_rows=rule.max_rows)
            if through is None:
                continue
            count = 0
            while time.monotonic() < deadline:
                batch = self.db.maintenance.retention_delete(
                    rule.status, through=through, batch=self.settings.batch)
                if batch:
                    count += batch
                    metrics.RETENTION_DELETED.labels(rule.status.value).inc(batch)
                if batch < self.settings.batch:
                    break
            if count:
                deleted[rule.status.value] = count
        if deleted:
            logger.info("retention: deleted %s", ", ".join(
                f"{n} {status}" for status, n in deleted.items()))
        return deleted


class RetentionTask:
    """The retention pass under the ``maintenance:retention`` lease (any process)."""

    def __init__(self, db: Database, settings: RetentionSettings, *, host: str,
                 first_delay: float | None = None) -> None:
        self.retention = Retention(db, settings)
        self.settings = settings
        self.lease = LoopLease(db, name=LEASE_NAME,
                               owner=f"retention:{host}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
                               host=host, ttl=max(3 * settings.interval, 10.0))
        self.task = PeriodicTask(
            name="retention", interval=settings.interval if settings.enabled else 0.0,
            run=self.run_pass, gate=self.gate,
            first_delay=settings.interval if first_delay is None else first_delay)
        #: Passes still to skip, and the length of the last skip (see :meth:`run_pass`).
        self._skip = 0
        self._quiet = 0

    def run_pass(self) -> dict[str, int]:
        """A pass, unless the last ones deleted nothing: after each pass that found
        nothing to delete the holder skips twice as many passes (1, 2, 4, at most
        ``QUIET_SKIP_MAX``), and a pass that deleted anything ends the skipping.

        Why: on a database at rest a pass is one transaction per rule that deletes
        nothing, every interval, paid by the one holder (issue 31); rows to delete
        appear at the pace jobs finish, and waiting a few intervals more for them
        costs a table nothing. The lease is held (renewed) every interval as before.
        """
        if self._skip > 0:
            self._skip -= 1
            return {}
        deleted = self.retention.run_pass()
        self._quiet = 0 if deleted else min(max(self._quiet * 2, 1), QUIET_SKIP_MAX)
        self._skip = self._quiet
        return deleted

    def gate(self) -> bool:
        """Hold the lease (renew or take it); False when another process runs retention."""
        try:
            return self.lease.hold()
        except errors.JobwardenError as exc:
            logger.warning("retention: cannot reach the lease table: %s", exc)
            self.lease.forget()
            return False

    def release(self) -> None:
        self.lease.release()
