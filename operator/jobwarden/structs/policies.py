"""The shared vocabulary: policy names and outcome reasons, defined once.

The same words appear in job classes (``Job.on_busy``), the standalone lock API
(``jobwarden.lease(on_busy=...)``), the ``JobSchedule`` and ``ExclusiveJob``
specs, the schedule store and the worker's outcomes and metric labels. Each
used to keep its own ``Literal`` (with different members); they all import
these now, so a word added here is added everywhere and a typo is a type error.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "CATCH_UPS",
    "FAILURE_REASONS",
    "LOCK_ON_BUSY",
    "ON_BUSY",
    "OVERLAPS",
    "RELEASE_REASONS",
    "SKIP_REASONS",
    "CatchUp",
    "FailureReason",
    "LockOnBusy",
    "OnBusy",
    "Overlap",
    "ReleaseReason",
    "SkipReason",
]

#: What a busy lease does to a job's run: ``defer`` it (back to pending, the
#: attempt given back), ``skip`` it (this run is dropped) or ``fail`` the attempt.
OnBusy = Literal["defer", "skip", "fail"]
#: What a busy lease does to the standalone lock API (no job to defer): return
#: without running (``skip``) or raise ``LeaseBusy`` (``fail``).
LockOnBusy = Literal["skip", "fail"]
#: A schedule's overlap policy (Kubernetes CronJob's ``concurrencyPolicy`` words).
Overlap = Literal["Allow", "Forbid", "Replace"]
#: What a schedule does with slots it missed while nothing ran (docs/schedules.md).
CatchUp = Literal["latest", "none", "all"]

#: Why an attempt failed (the ``reason`` label of ``jobs_failed``/``jobs_retried``).
#: ``lease_busy`` is a job with ``on_busy = "fail"`` whose lease was held;
#: ``pod_failure`` a pod run whose pod failed before the job recorded an outcome.
FailureReason = Literal["error", "timeout", "unknown_job", "bad_data", "lease_busy",
                        "pod_failure"]
#: Why a claim was given back unrun (nothing counted against its attempts).
ReleaseReason = Literal["lease_busy", "shutdown", "database_unavailable"]
#: Why a run was skipped (the ``reason`` label of ``jobs_skipped``).
SkipReason = Literal["lease_busy", "on_busy_skip"]

ON_BUSY: tuple[OnBusy, ...] = get_args(OnBusy)
LOCK_ON_BUSY: tuple[LockOnBusy, ...] = get_args(LockOnBusy)
OVERLAPS: tuple[Overlap, ...] = get_args(Overlap)
CATCH_UPS: tuple[CatchUp, ...] = get_args(CatchUp)
FAILURE_REASONS: tuple[FailureReason, ...] = get_args(FailureReason)
RELEASE_REASONS: tuple[ReleaseReason, ...] = get_args(ReleaseReason)
SKIP_REASONS: tuple[SkipReason, ...] = get_args(SkipReason)
