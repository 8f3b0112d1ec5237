"""The tick engine: one tick of a worker's work, on demand (``jobwarden tick``, ``/tick``).

One tick = refresh the host in the registry, reap stale claims, run due
schedules (the pass the composition root hands the :class:`Ticker`), then run
up to ``max_jobs`` jobs one after the other, each with at most ``timeout``
seconds. Jobs are claimed through the host registry exactly as a worker claims
them (``host_cap=True``), so a tick honours a drain and the per-host cap, runs
through the worker's own execution path (its extensions such as leases, hooks,
fenced outcome writes, metrics) and is heartbeated by the worker's own
heartbeater. The HTTP route that triggers ticks is :mod:`jobwarden.tick.route`.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jobwarden import settings
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.worker.context import Attempt, Cancelled, Failed, Released, Succeeded

if TYPE_CHECKING:
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["SchedulePass", "TickLimits", "TickResult", "Ticker"]

#: Runs due schedules once; returns how many slots it enqueued (None: not counted).
SchedulePass = Callable[[], object]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TickLimits:
    """Per-call defaults and the server-side maxima request parameters are clamped to."""

    #: Jobs per tick when the request does not say (``JOBWARDEN_TICK_MAX_JOBS``).
    default_max_jobs: int = 10
    #: The most a request may ask for (``JOBWARDEN_TICK_MAX_JOBS_LIMIT``).
    max_jobs_limit: int = 100
    #: Per-job time limit when the request does not say (``JOBWARDEN_TICK_TIMEOUT``).
    default_timeout: float = 300.0
    #: The longest per-job limit a request may ask for (``JOBWARDEN_TICK_TIMEOUT_LIMIT``).
    timeout_limit: float = 900.0
    #: No new job starts once a tick has run this long (``JOBWARDEN_TICK_BUDGET``),
    #: so one call stays within an HTTP client's patience whatever max_jobs says.
    budget: float = 60.0

    @classmethod
    def from_env(cls) -> TickLimits:
        number = settings.env_number
        limit = int(number("JOBWARDEN_TICK_MAX_JOBS_LIMIT", 100, integer=True))
        timeout_limit = number("JOBWARDEN_TICK_TIMEOUT_LIMIT", 900.0)
        return cls(
            default_max_jobs=min(int(number("JOBWARDEN_TICK_MAX_JOBS", 10, integer=True)), limit),
            max_jobs_limit=limit,
            default_timeout=min(number("JOBWARDEN_TICK_TIMEOUT", 300.0), timeout_limit),
            timeout_limit=timeout_limit,
            budget=number("JOBWARDEN_TICK_BUDGET", 60.0),
        )

    def bound(self, *, max_jobs: int | None, timeout: float | None) -> tuple[int, float]:
        jobs = self.default_max_jobs if max_jobs is None else max_jobs
        seconds = self.default_timeout if timeout is None else timeout
        return max(0, min(jobs, self.max_jobs_limit)), min(seconds, self.timeout_limit)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TickResult:
    request_id: str
    host: str
    skipped: bool = False
    draining: bool = False
    reaped: int = 0
    scheduled: int | None = None
    ran: int = 0
    outcomes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: Why the tick stopped starting jobs: max_jobs, no_job (empty queue or cap
    #: reached), draining, budget, stopping, or skipped.
    stopped: str = "max_jobs"
    max_jobs: int = 0
    timeout: float = 0.0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": True, "skipped": self.skipped, "requestId": self.request_id,
            "host": self.host, "draining": self.draining, "reaped": self.reaped,
            "scheduled": self.scheduled, "ran": self.ran, "outcomes": dict(self.outcomes),
            "stopped": self.stopped, "maxJobs": self.max_jobs, "timeout": self.timeout,
            "seconds": round(self.seconds, 3),
        }


def _outcome_name(attempt: Attempt) -> str:
    outcome = attempt.outcome
    if isinstance(outcome, Succeeded):
        return "completed"
    if isinstance(outcome, Failed):
        return "timeout" if outcome.reason == "timeout" else "failed"
    if isinstance(outcome, Cancelled):
        return "cancelled"
    if isinstance(outcome, Released):
        return "released"
    return "unknown"


class Ticker:
    """Runs ticks for one host, one at a time.

    It drives a worker through the worker's handle (:mod:`jobwarden.worker.handle`):
    a tick claims, runs, heartbeats and records exactly as the worker does.
    ``standalone`` is for ``jobwarden tick``: the worker was built but not
    started, so the ticker runs its recorder for the duration of a tick, and
    :meth:`close` stops that worker (``on_close``).
    ``run_schedules`` is the schedule pass of each tick (None: no schedules here).
    """

    def __init__(self, worker: WorkerHandle, *, limits: TickLimits | None = None,
                 standalone: bool = False, run_schedules: SchedulePass | None = None,
                 on_close: Callable[[], object] | None = None) -> None:
        self.worker = worker
        self._on_close = on_close
        self.run_schedules = run_schedules
        self.db = worker.db
        self.host = worker.host
        self.limits = limits or TickLimits.from_env()
        self._standalone = standalone
        self._running = threading.Lock()

    def close(self) -> None:
        """Stop the worker a standalone ticker drives (its extensions' stop hooks run)."""
        if self._on_close is not None:
            self._on_close()

    def run(self, *, max_jobs: int | None = None, timeout: float | None = None,
            request_id: str | None = None) -> TickResult:
        request_id = request_id or uuid.uuid4().hex
        jobs, seconds = self.limits.bound(max_jobs=max_jobs, timeout=timeout)
        if not self._running.acquire(blocking=False):
            return TickResult(request_id=request_id, host=self.host, skipped=True,
                              stopped="skipped", max_jobs=jobs, timeout=seconds)
        try:
            settings = self.worker.settings
            self.db.hosts.touch(host=self.host, pool=settings.pool,
                                code_version=settings.code_version)
            owner = uuid.uuid4()
            ttl = self.limits.budget + seconds + 60.0
            if not self.db.hosts.tick_acquire(host=self.host, owner=owner, ttl_seconds=ttl):
                return TickResult(request_id=request_id, host=self.host, skipped=True,
                                  stopped="skipped", max_jobs=jobs, timeout=seconds)
            try:
                return self._tick(request_id, jobs, seconds)
            finally:
                self.db.hosts.tick_release(host=self.host, owner=owner)
        finally:
            self._running.release()

    def _tick(self, request_id: str, max_jobs: int, timeout: float) -> TickResult:
        started = time.monotonic()
        budget_ends = started + self.limits.budget
        reaped = self.worker.reap()
        scheduled: int | None = None
        if self.run_schedules is not None:
            found = self.run_schedules()
            scheduled = found if isinstance(found, int) else None
        draining = any(h.draining for h in self.db.hosts.status(host=self.host))
        outcomes: collections.Counter[str] = collections.Counter()
        stopped = "max_jobs"
        ran = 0
        while ran < max_jobs:
            if draining:
                stopped = "draining"
                break
            if self.worker.stopping() and not self._standalone:
                stopped = "stopping"
                break
            if time.monotonic() >= budget_ends:
                stopped = "budget"
                break
            claims = self.db.jobs.claim(
                host=self.host, limit=1, grace_seconds=self.worker.settings.heartbeat_grace,
                queues=self.worker.settings.queues or None, host_cap=True,
            )
            if not claims:
                stopped = "no_job"
                break
            claim = claims[0]
            if claim.timeout_seconds > timeout:
                claim = dataclasses.replace(claim, timeout_seconds=timeout)
            outcomes[self._run_one(claim)] += 1
            ran += 1
        return TickResult(request_id=request_id, host=self.host, draining=draining,
                          reaped=reaped, scheduled=scheduled, ran=ran, outcomes=outcomes,
                          stopped=stopped, max_jobs=max_jobs, timeout=timeout,
                          seconds=time.monotonic() - started)

    def _run_one(self, claim: ClaimedJob) -> str:
        """Run one claimed attempt in this thread, heartbeated, and wait until recorded."""
        worker = self.worker
        attempt = Attempt(claim)
        recorder_thread: threading.Thread | None = None
        if self._standalone:
            recorder_thread = threading.Thread(target=worker.recorder.run,
                                               name="jobwarden-tick-recorder", daemon=True)
            recorder_thread.start()
        done = threading.Event()
        # Heartbeat it and enforce its deadline: the worker's own heartbeater.
        beat = threading.Thread(target=worker.watch, args=(attempt, done),
                                name="jobwarden-tick-heartbeat", daemon=True)
        beat.start()
        try:
            # The worker's own path: its extensions (leases) around perform, then the outcome.
            worker.execute(attempt)
        finally:
            done.set()
            beat.join()
            worker.recorder.idle(timeout=30.0)
            if recorder_thread is not None:
                worker.recorder.stop()
                recorder_thread.join(timeout=30.0)
        return _outcome_name(attempt)
