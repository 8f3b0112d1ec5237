"""Slot arithmetic: a slot's unique key, its job and lease, and counting passed slots.

Pure functions shared by the runner (one job per slot), the store (backfill,
missed slots on a change or a resume) and the CLI; no database.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from jobwarden.jobs import definitions
from jobwarden.schedules import expressions, planning
from jobwarden.structs.jobs import JobSpec
from jobwarden.structs.leases import lease_name
from jobwarden.structs.policies import OnBusy, Overlap

__all__ = ["job_fields", "job_spec", "passed_slots", "schedule_lease", "slot_key"]


def slot_key(name: str, slot: dt.datetime) -> str:
    """The unique key of a slot's job: ``<name>:<slot in UTC ISO 8601>`` (whole seconds, Z)."""
    return f"{name}:{_slot_text(slot)}"


@functools.lru_cache(maxsize=1024)
def _slot_text(slot: dt.datetime) -> str:
    """A slot as UTC ISO 8601; cached, since a pass gives many schedules the same slot."""
    utc = slot.astimezone(dt.UTC).replace(microsecond=0)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_lease(name: str) -> str:
    """The lease a Forbid/Replace schedule's runs carry: ``schedule:<name>`` (hashed if long)."""
    return lease_name(f"schedule:{name}")


def job_spec(*, name: str, slot: dt.datetime, job_class: str, data: Any, queue: str | None,
             priority: int | None, timeout_seconds: float | None, max_retries: int | None,
             idempotent: bool | None, overlap: Overlap, pod_run: str | None = None) -> JobSpec:
    """The job of one slot. Unset fields take the Job defaults, the same on every runner.

    ``pod_run``: the schedule's, so a pod-per-run schedule's jobs are the operator's
    to claim (never a worker's).
    """
    (queue_, priority_, max_retries_, timeout_, idempotent_, lease, on_busy) = job_fields(
        name=name, queue=queue, priority=priority, timeout_seconds=timeout_seconds,
        max_retries=max_retries, idempotent=idempotent, overlap=overlap)
    return JobSpec(
        job_class=job_class, data=data, queue=queue_, priority=priority_,
        max_retries=max_retries_, timeout_seconds=timeout_, idempotent=idempotent_,
        unique_key=slot_key(name, slot), lease_name=lease, on_busy=on_busy,
        schedule_name=name, pod_run=pod_run,
    )


def job_fields(*, name: str, queue: str | None, priority: int | None,
               timeout_seconds: float | None, max_retries: int | None,
               idempotent: bool | None, overlap: Overlap,
               ) -> tuple[str, int, int, float, bool, str | None, OnBusy | None]:
    """What every slot job of a schedule shares, defaults applied: queue, priority,
    max_retries, timeout_seconds, idempotent, lease_name, on_busy.

    One place for the defaults, so :func:`job_spec` (backfill, run-now) and the
    runner's pass (which copies rows without building a JobSpec per slot) agree.
    """
    base = definitions.Job
    return (
        queue or base.queue,
        base.priority if priority is None else priority,
        base.max_retries if max_retries is None else max_retries,
        float(base.timeout if timeout_seconds is None else timeout_seconds),
        base.idempotent if idempotent is None else idempotent,
        schedule_lease(name) if overlap in ("Forbid", "Replace") else None,
        # Forbid: a run that finds the previous one still holding the lease is dropped
        # (never queued behind it); Replace: the new run waits until the old one stopped.
        _ON_BUSY.get(overlap),
    )


_ON_BUSY: dict[Overlap, OnBusy] = {"Forbid": "skip", "Replace": "defer"}


def passed_slots(expr: expressions.Expression, *, since: dt.datetime,
                 now: dt.datetime) -> tuple[int, dt.datetime | None]:
    """How many slots of ``expr`` lie in ``(since, now]`` and the newest of them.

    For slots that get no run (a pause, a replaced expression): all are missed.
    Bounded like the runner's plan (a lower bound after very long cron pauses).
    """
    if now <= since:
        return 0, None
    plan = planning.plan_due(expr, last_slot=since, now=now, catch_up="none",
                             tolerance_seconds=0)
    newest = expr.prev_at_or_before(now)
    return plan.missed + len(plan.run), newest if newest is not None and newest > since else None
