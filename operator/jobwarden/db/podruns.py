"""Operations on pod runs (jobs whose ``pod_run`` is set), named table-first.

Only SQL lives here (db/sql/podruns.sql); what to do with a busy lease, which
failure cause means what, and the run-job process live in
:mod:`jobwarden.podruns`, which hands this module plain values.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from jobwarden.db.jobs import ClaimColumns, claimed_row
from jobwarden.structs.podruns import PodRunFailed, PodRunRow, RunningPodRun, slot_of
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database, Row

#: fragment_claim_rows' columns (db.jobs.ClaimColumns), then the pod run's.
_CLAIM_COLUMNS = len(ClaimColumns._fields)


def _row(row: Row) -> PodRunRow:
    pod_run, unique_key, lease_token, cancel_requested = row[_CLAIM_COLUMNS:]
    return PodRunRow(claim=claimed_row(row[:_CLAIM_COLUMNS]), pod_run=pod_run,
                     unique_key=unique_key, lease_token=lease_token,
                     cancel_requested=bool(cancel_requested))


class RunningColumns(NamedTuple):
    """pod_run_running's columns, named as the statement names them (checked by
    tests/db/test_named_rows.py)."""

    id: int
    pod_run: str
    claim_token: str
    attempts: int
    schedule_name: str | None
    unique_key: str | None
    cancel_requested: bool
    claimed_at: datetime.datetime | None
    heartbeat_at: datetime.datetime | None
    claim_expires_at: datetime.datetime | None
    claimed_by: str | None
    lease_token: int | None


def _running(r: RunningColumns) -> RunningPodRun:
    return RunningPodRun(job_id=r.id, pod_run=r.pod_run, claim_token=r.claim_token,
                         attempt=r.attempts, schedule_name=r.schedule_name,
                         slot=slot_of(r.schedule_name, r.unique_key),
                         cancel_requested=bool(r.cancel_requested), claimed_at=r.claimed_at,
                         heartbeat_at=r.heartbeat_at, claim_expires_at=r.claim_expires_at,
                         claimed_by=r.claimed_by, lease_token=r.lease_token)


class PodRunsTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def claim(self, *, pod_runs: Sequence[str], claimant: str, start_deadline: float,
              limit: int, batch: uuid.UUID) -> list[PodRunRow]:
        """Claim up to ``limit`` due pod runs of ``pod_runs`` for ``claimant`` (durably).

        The claim tokens derive from ``batch``: after an ambiguous failure,
        :meth:`claims_of_batch` finds what this call took.
        """
        if limit <= 0 or not pod_runs:
            return []
        rows = self._db.rows("pod_run_claim", {
            "pod_runs": list(pod_runs), "claimant": claimant, "limit": limit,
            "start_deadline": start_deadline, "batch": batch})
        return [_row(r) for r in rows]

    def claims_of_batch(self, *, claimant: str, batch: uuid.UUID) -> list[PodRunRow]:
        rows = self._db.rows("pod_run_claims_of_batch", {"claimant": claimant, "batch": batch})
        return [_row(r) for r in rows]

    def start(self, *, job_id: int, claim_token: uuid.UUID, host: str, grace_seconds: float,
              lease_token: int | None = None) -> PodRunRow | None:
        """Record that run-job started under this claim; None when the claim is gone.

        ``lease_token``: the one handed to the pod; a claim that recorded another
        one is not this pod's (None: not checked).
        """
        found = self._db.row("pod_run_start", {"id": job_id, "token": claim_token,
                                               "host": host, "grace": grace_seconds,
                                               "lease_token": lease_token})
        return _row(found) if found else None

    def attempt_of(self, *, job_id: int, claim_token: uuid.UUID) -> int | None:
        """The attempt this claim counted, or None when the claim is gone."""
        found = self._db.row("pod_run_attempt", {"id": job_id, "token": claim_token})
        return int(found[0]) if found else None

    def fail(self, *, job_id: int, claim_token: uuid.UUID, error: str,
             retry_in_seconds: float) -> PodRunFailed | None:
        """End a claim whose pod failed (dead-worker rules); None when fenced."""
        found = self._db.row("pod_run_fail", {
            "id": job_id, "token": claim_token, "error": error, "retry_in": retry_in_seconds,
            "lease_channel": self._db.leases.channel, "jobs_channel": self._db.jobs.channel,
            "done_channel": self._db.jobs.done_channel})
        if found is None:
            return None
        status, queue, job_class, freed, _notified = found
        return PodRunFailed(job_id=job_id, status=JobStatus(status), queue=queue,
                            job_class=job_class, leases_freed=int(freed))

    def running(self, pod_runs: Sequence[str]) -> list[RunningPodRun]:
        if not pod_runs:
            return []
        return [_running(RunningColumns._make(row))
                for row in self._db.rows("pod_run_running", {"pod_runs": list(pod_runs)})]
