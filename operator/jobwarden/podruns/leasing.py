"""The lease of a pod run inside its pod: adopted from the claim, renewed, released.

The operator took the row's lease when it claimed the run (owner = the claim
token) and handed its fencing token to the pod. ``jobwarden run-job`` does not
take it again -- it *adopts* it: one owner- and token-fenced renewal before the job
starts proves the lease is still this claim's, and from then on everything is the
worker's exclusive-jobs extension unchanged (this is a subclass): every heartbeat
renews it, ``Job.heartbeat()`` renews it, it is released the moment the code
stopped, and a takeover while the job runs is counted as lease lost.

If the handed lease was lost before the job started (it lapsed and another owner
took it), nothing ran under it, so it is asked for once more; still busy, the
row's ``on_busy`` rule applies exactly as a worker applies it
(:func:`jobwarden.extensions.exclusive.busy_outcome`). A job whose row names no lease but
whose class is exclusive gets its lease here, as a worker would take it.
"""

from __future__ import annotations

import time

from jobwarden import errors
from jobwarden.coordination.leases import JobLease
from jobwarden.coordination.onbusy import lease_window, row_lease_kind
from jobwarden.db.database import Database
from jobwarden.extensions.exclusive import ExclusiveJobs, busy_outcome
from jobwarden.jobs import definitions
from jobwarden.structs.leases import Acquisition, lease_name
from jobwarden.worker.context import Attempt, Outcome, Released
from jobwarden.worker.extensions import ExtensionFactory, WorkerExtension
from jobwarden.worker.handle import WorkerHandle


class PodRunLease(ExclusiveJobs):
    """The exclusive-jobs extension, adopting the lease handed to the pod."""

    def __init__(self, db: Database, *, host: str, lease_token: int | None) -> None:
        super().__init__(db, host=host)
        self._handed = lease_token

    def adopt(self, token: int) -> None:
        """Adopt ``token`` (the one the claim recorded) when none was handed in."""
        if self._handed is None:
            self._handed = token

    @classmethod
    def factory(cls, lease_token: int | None) -> ExtensionFactory:
        """An extension factory for ``Worker(extensions=[...])``."""
        def build(worker: WorkerHandle) -> WorkerExtension:
            return cls(worker.db, host=worker.host, lease_token=lease_token)
        return build

    def guard(self, attempt: Attempt, job_class: type[definitions.Job]) -> Outcome | None:
        claim = attempt.claim
        if claim.lease_name is None or self._handed is None:
            return super().guard(attempt, job_class)  # as a worker: the class's own lease
        name = lease_name(claim.lease_name)
        kind = row_lease_kind(claim.lease_name)
        window = claim.lease_ttl_seconds or lease_window(claim.timeout_seconds)
        owner = str(claim.claim_token)
        sent = time.monotonic()
        try:
            renewed = self._db.leases.renew(name=name, owner=owner, token=self._handed,
                                            ttl_seconds=window)
            if renewed is not None:
                found = Acquisition(acquired=True, name=name, slot=0, token=self._handed,
                                    expires_at=renewed.expires_at,
                                    remaining_seconds=renewed.remaining_seconds)
            else:
                # Lost before the job started: nothing ran under it, so ask once more.
                found = self._db.leases.try_acquire(name=name, owner=owner, ttl_seconds=window,
                                                    host=self._host, job_id=claim.id,
                                                    claim_token=claim.claim_token)
        except errors.DatabaseUnavailable:
            return Released(delay_seconds=1.0, deferral=False, reason="database_unavailable")
        if not found.acquired:
            return busy_outcome(attempt, found, kind=kind,
                                policy=claim.on_busy or job_class.on_busy)
        assert found.token is not None
        attempt.lease_name = name
        attempt.lease_token = found.token
        with self._lock:
            self._held[claim.id] = JobLease(self._db, found, attempt=attempt, owner=owner,
                                            window=window, kind=kind, requested_at=sent)
        return None
