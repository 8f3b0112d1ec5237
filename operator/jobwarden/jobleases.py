"""An exclusive attempt's lease: the shared lease holder, and the job it is held for.

Apart from :mod:`jobwarden.exclusive` (which takes, renews and releases these)
so that a worker imports the lock API (:mod:`jobwarden.leases`) with the first
attempt that takes a lease, not at start-up (docs/benchmarks.md, "Idle worker
RSS"); the pod-run claim (:mod:`jobwarden.podruns.leasing`) holds its leases in
the same class.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from jobwarden.leases import LeaseHolder

if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.leases import LeaseKind
    from jobwarden.structs.leases import Acquisition
    from jobwarden.worker.context import Attempt

__all__ = ["JobLease"]

logger = logging.getLogger("jobwarden.leases")


class JobLease(LeaseHolder):
    """An attempt's lease: the shared holder, and the job it is held for (for the logs)."""

    def __init__(self, db: Database, acquisition: Acquisition, *, attempt: Attempt,
                 owner: str, window: float, kind: LeaseKind, requested_at: float) -> None:
        super().__init__(db, acquisition, owner=owner, ttl=window, kind=kind,
                         requested_at=requested_at)
        self.attempt = attempt
        #: Where it was found lost (renewal or release), for the warning.
        self.lost_at = "renewal"

    def _on_lost(self) -> None:
        claim = self.attempt.claim
        logger.warning("job %d (%s) attempt %d lost lease %r (token %d) at %s: another owner "
                       "took it over while the job was running", claim.id, claim.job_class,
                       claim.attempt, self.name, self.token, self.lost_at)
