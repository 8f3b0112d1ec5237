"""Per-run Events on a JobSchedule, as a CronJob posts them, without flooding the API.

A CronJob tells ``kubectl describe`` what happened to each run: ``SuccessfulCreate``,
``JobAlreadyActive`` (skipped, a run is active), ``MissSchedule``,
``SawCompletedJob``; a failed run is a Warning. A JobSchedule's operator sees the
same from the database on every status pass: the row's fate counts (enqueued,
skipped, missed) and the schedule's jobs that finished since the last pass. This
module turns those into Events, pure apart from the clock it is given:

* **Aggregated and rate-limited per schedule and reason**: the first occurrence of
  a reason after a quiet minute is posted at once, naming the job and the slot;
  occurrences within :data:`MIN_INTERVAL` of the last Event of that reason are
  counted and posted together when it has passed ("enqueued 60 jobs since ...,
  newest job 123"). A schedule firing every second therefore costs at most one
  Event per reason a minute (five reasons), an hourly one an Event per run.
  (client-go's EventCorrelator does the same for Kubernetes' own controllers;
  kopf posts every Event as a new object, so the aggregation is done here.)
* **No history replay**: what an operator finds when it first sees a schedule
  (after its start, a failover) is the baseline; only what happens after is told.
* **Outcomes by job id**: the jobs of a schedule are read by ``id >= floor``
  (jobs_schedule_idx), where ``floor`` is the oldest job still active at the last
  pass; each finished job is told once (``counted``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Sequence

from jobwarden.controller.kube.status import Event, timestamp

#: Seconds between two Events of one reason on one schedule (the rest are aggregated).
MIN_INTERVAL = 60.0
#: Terminal job statuses and the reason each is told under.
FINISHED = {"completed": "SawCompletedJob", "failed": "JobFailed",
            "interrupted": "JobFailed", "cancelled": "JobCancelled"}
ACTIVE = ("pending", "processing")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """A job of the schedule, as read by ``id >= floor``."""

    id: int
    status: str
    unique_key: str | None = None
    error: str | None = None


@dataclasses.dataclass
class _Pending:
    """One reason's occurrences not told yet."""

    count: int = 0
    newest: str = ""
    error: str = ""
    since: dt.datetime | None = None


@dataclasses.dataclass
class _State:
    enqueued: int
    skipped: int
    missed: int
    floor: int
    #: A job of the schedule was active at the last read.
    active: bool = False
    counted: set[int] = dataclasses.field(default_factory=set)
    last_posted: dict[str, float] = dataclasses.field(default_factory=dict)
    pending: dict[str, _Pending] = dataclasses.field(default_factory=dict)


_SLOT = re.compile(r":(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))$")


def slot_of(unique_key: str | None) -> str:
    """The slot of a slot job's unique key (``<name>:<slot UTC ISO 8601>``), else ''."""
    found = _SLOT.search(unique_key or "")
    return found.group(1) if found else ""


def last_line(error: str | None) -> str:
    """The exception line of a stored error (its traceback's last line)."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


class RunEvents:
    """Per-schedule state (by resource uid) and the Events one pass should post."""

    def __init__(self, *, min_interval: float = MIN_INTERVAL) -> None:
        self.min_interval = min_interval
        self._states: dict[str, _State] = {}

    def floor(self, uid: str, *, last_job_id: int | None) -> int:
        """The lowest job id the next outcome read needs (``id >= floor``)."""
        state = self._states.get(uid)
        if state is not None:
            return state.floor
        return last_job_id if last_job_id is not None else 0

    def needs_read(self, uid: str, *, enqueued: int, active: bool) -> bool:
        """Can anything have happened since the last pass? Not when no job was or is
        active and nothing was enqueued: an idle schedule's pass reads no jobs."""
        state = self._states.get(uid)
        if state is None or active or state.active or enqueued != state.enqueued:
            return True
        return any(p.count for p in state.pending.values())

    def forget(self, uid: str) -> None:
        self._states.pop(uid, None)

    def observe(self, uid: str, *, enqueued: int, skipped: int, missed: int,
                outcomes: Sequence[Outcome], overlap: str, catch_up: str,
                now: float, wall: dt.datetime) -> list[Event]:
        """What happened since the last pass of ``uid``, as the Events to post now."""
        state = self._states.get(uid)
        if state is None:  # first sight: the baseline, nothing told
            active = [o.id for o in outcomes if o.status in ACTIVE]
            newest = max((o.id for o in outcomes), default=-1)
            self._states[uid] = _State(
                enqueued=enqueued, skipped=skipped, missed=missed,
                floor=min(active) if active else newest + 1, active=bool(active),
                counted={o.id for o in outcomes if o.status in FINISHED})
            return []
        self._count(state, "SuccessfulCreate", enqueued - state.enqueued, wall,
                    newest=_newest_enqueued(outcomes))
        self._count(state, "JobAlreadyActive", skipped - state.skipped, wall)
        self._count(state, "MissSchedule", missed - state.missed, wall)
        state.enqueued, state.skipped, state.missed = enqueued, skipped, missed
        for outcome in outcomes:
            reason = FINISHED.get(outcome.status)
            if reason is None or outcome.id in state.counted:
                continue
            state.counted.add(outcome.id)
            detail = f"job {outcome.id}"
            slot = slot_of(outcome.unique_key)
            if slot:
                detail += f" (slot {slot})"
            self._count(state, reason, 1, wall, newest=detail,
                        error=last_line(outcome.error)[:200])
        active = [o.id for o in outcomes if o.status in ACTIVE]
        state.active = bool(active)
        if outcomes:
            state.floor = min(active) if active else max(o.id for o in outcomes) + 1
        state.counted = {i for i in state.counted if i >= state.floor}
        return self._due(state, now=now, overlap=overlap, catch_up=catch_up)

    def _count(self, state: _State, reason: str, delta: int, wall: dt.datetime, *,
               newest: str = "", error: str = "") -> None:
        if delta <= 0:
            return
        pending = state.pending.setdefault(reason, _Pending())
        if pending.count == 0:
            pending.since = wall
        pending.count += delta
        if newest:
            pending.newest, pending.error = newest, error

    def _due(self, state: _State, *, now: float, overlap: str,
             catch_up: str) -> list[Event]:
        posted: list[Event] = []
        for reason in ("SuccessfulCreate", "JobAlreadyActive", "MissSchedule",
                       "SawCompletedJob", "JobFailed", "JobCancelled"):
            pending = state.pending.get(reason)
            if pending is None or pending.count == 0:
                continue
            last = state.last_posted.get(reason)
            if last is not None and now - last < self.min_interval:
                continue  # aggregated: told together once the interval has passed
            posted.append(_event(reason, pending, overlap=overlap, catch_up=catch_up))
            state.last_posted[reason] = now
            state.pending[reason] = _Pending()
        return posted


def _newest_enqueued(outcomes: Sequence[Outcome]) -> str:
    if not outcomes:
        return ""
    newest = max(outcomes, key=lambda o: o.id)
    slot = slot_of(newest.unique_key)
    return f"job {newest.id}" + (f" (slot {slot})" if slot else "")


def _event(reason: str, pending: _Pending, *, overlap: str, catch_up: str) -> Event:
    count, newest = pending.count, pending.newest
    since = f" since {timestamp(pending.since)}" if pending.since is not None else ""
    many = count > 1
    if reason == "SuccessfulCreate":
        message = (f"enqueued {count} jobs{since}, newest {newest}" if many
                   else f"enqueued {newest or 'a job'}")
        return Event(type="Normal", reason=reason, message=message)
    if reason == "JobAlreadyActive":
        return Event(type="Normal", reason=reason, message=(
            f"{count} slot(s) skipped{since}: the previous run was still active "
            f"(concurrencyPolicy {overlap})"))
    if reason == "MissSchedule":
        return Event(type="Warning", reason=reason, message=(
            f"{count} slot(s) missed{since}: too late for the catch-up rule "
            f"({catch_up}) or passed while suspended"))
    if reason == "SawCompletedJob":
        message = (f"{count} jobs completed{since}, newest {newest}" if many
                   else f"{newest} completed")
        return Event(type="Normal", reason=reason, message=message)
    if reason == "JobFailed":
        error = f": {pending.error}" if pending.error else ""
        message = (f"{count} jobs failed{since}, newest {newest}{error}" if many
                   else f"{newest} failed{error}")
        return Event(type="Warning", reason=reason, message=message)
    message = (f"{count} jobs cancelled{since}, newest {newest}" if many
               else f"{newest} cancelled")
    return Event(type="Normal", reason=reason, message=message)
