"""What a busy lease does to a claimed run, decided and counted in one place.

Two claimants take a job's lease right after claiming its row: a worker (the
exclusive-jobs extension, :mod:`jobwarden.extensions.exclusive`) and the operator claiming a
pod run (:mod:`jobwarden.podruns`). When the lease is busy, both must treat the
run exactly alike -- the rules of DESIGN section 5 -- so the decision and its
counters live here and both call them:

- ``defer`` (the default): the claim is given back unrun, pending again at
  ``now + min(remaining lease, 30 s)`` (never sooner than 0.1 s), the attempt the
  claim counted refunded; counted as **deferred** and **skipped** (``lease_busy``).
- ``skip``: this run is dropped, recorded as cancelled with the reason; counted
  as **skipped** (``on_busy_skip``) and cancelled.
- ``fail``: a failed attempt (``lease_busy``), retried like any failure.

Every busy answer is counted in ``jobwarden_lease_busy_total`` by lease kind.
Nothing here writes to the database: each caller records the verdict its own way
(the worker through its recorder, the pod-run claim in its claim pass).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from jobwarden.observability import metrics
from jobwarden.structs.policies import FailureReason, OnBusy, ReleaseReason
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:  # types only: the worker's outcome path imports this module at start
    from jobwarden.coordination.leases import LeaseKind
    from jobwarden.structs.leases import Acquisition

__all__ = ["MAX_DEFER_SECONDS", "MIN_DEFER_SECONDS", "BusyVerdict", "count_busy",
           "count_deferral", "count_failure", "lease_window", "row_lease_kind", "verdict"]

#: A deferred job is retried when the lease may be free, but at most this late...
MAX_DEFER_SECONDS = 30.0
#: ...and not sooner than this, so a lease that is "just lapsing" cannot cause a
#: claim/release loop with the database.
MIN_DEFER_SECONDS = 0.1


def lease_window(timeout_seconds: float) -> float:
    """How long a job lease lives without renewal: the claim timeout + max(60, it)."""
    return timeout_seconds + max(60.0, timeout_seconds)


def row_lease_kind(name: str) -> LeaseKind:
    """The metrics kind of a lease named on a job row by its prefix."""
    for prefix, kind in (("schedule:", "schedule"), ("key:", "key"), ("job:", "job")):
        if name.startswith(prefix):
            return kind  # type: ignore[return-value]
    return "key"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BusyVerdict:
    """What to do with a run whose lease was busy."""

    policy: OnBusy
    #: Who holds the lease, for logs and errors ("<owner> on <host>").
    holder: str
    #: ``defer``: seconds until the run is due again.
    delay_seconds: float
    #: ``skip`` / ``fail``: the error recorded on the job.
    error: str


def verdict(found: Acquisition, *, policy: str | None) -> BusyVerdict:
    """The verdict for a busy ``found`` under ``policy`` (None or unknown = defer)."""
    holder = f"{found.holder or 'another owner'}" + (
        f" on {found.holder_host}" if found.holder_host else "")
    chosen: OnBusy = "skip" if policy == "skip" else "fail" if policy == "fail" else "defer"
    if chosen == "skip":
        error = f"skipped: lease {found.name!r} busy (held by {holder})"
    else:
        error = f"lease {found.name!r} busy (held by {holder})"
    delay = max(min(found.retry_after, MAX_DEFER_SECONDS), MIN_DEFER_SECONDS)
    return BusyVerdict(policy=chosen, holder=holder, delay_seconds=delay, error=error)


def count_busy(kind: LeaseKind, busy: BusyVerdict, *, queue: str, job_class: str) -> None:
    """Count a busy answer when it is decided (before the verdict is recorded)."""
    metrics.LEASE_BUSY.labels(kind).inc()
    if busy.policy == "skip":
        metrics.JOBS_SKIPPED.labels(queue, job_class, "on_busy_skip").inc()


def count_deferral(queue: str, job_class: str, reason: ReleaseReason) -> None:
    """A claim given back unrun because of a busy lease, once that is recorded."""
    metrics.JOBS_DEFERRED.labels(queue, job_class).inc()
    metrics.JOBS_SKIPPED.labels(queue, job_class, reason).inc()


def count_failure(queue: str, job_class: str, reason: FailureReason,
                  status: JobStatus) -> None:
    """A failed attempt, once recorded, by the status it led to (retried/cancelled/failed)."""
    if status is JobStatus.PENDING:
        metrics.JOBS_RETRIED.labels(queue, job_class, reason).inc()
    elif status is JobStatus.CANCELLED:
        metrics.JOBS_CANCELLED.labels(queue, job_class).inc()
    else:
        metrics.JOBS_FAILED.labels(queue, job_class, reason).inc()
