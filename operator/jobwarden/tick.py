"""One tick of work, on demand: the ``/tick`` HTTP route and ``jobwarden tick``.

For places that can only run cron + curl. One tick = refresh the host in the
registry, reap stale claims, run due schedules (the pass the composition root
hands the :class:`Ticker`), then run up to ``max_jobs`` jobs one after the
other, each with at most ``timeout`` seconds. Jobs are claimed through the host
registry exactly as a worker claims them (``host_cap=True``), so a tick honours a
drain and the per-host cap, runs through the worker's own execution path (its
extensions such as leases, hooks, fenced outcome writes, metrics) and is
heartbeated by the worker's own heartbeater.

The HTTP route is an attack surface on a pod's network, so its rules are strict
and each is tested on its own:

* not served (404) unless a token is configured (``JOBWARDEN_TICK_TOKEN``, or a
  file named by ``JOBWARDEN_TICK_TOKEN_FILE``, read per request so a rotated
  Secret takes effect without a restart);
* GET and POST only (405 otherwise);
* any forwarding header (:data:`FORWARDING_HEADERS`), even empty, is refused
  (403): the route is for an in-cluster caller, never through a proxy or an
  ingress, where the caller's identity would be someone else's claim;
* the token travels in ``X-Jobwarden-Token``; ``?token=`` is accepted only with
  ``JOBWARDEN_TICK_TOKEN_IN_QUERY=true`` (query strings end up in access logs);
  the comparison is constant-time (``hmac.compare_digest`` on SHA-256 digests,
  so not even the token's length leaks); missing or wrong -> 403;
* an overlapping tick on the same host answers 200 ``{"ok": true, "skipped": true}``
  (a per-process lock plus an owner-fenced, expiring lease on the host row, so
  it holds across processes sharing the host name);
* ``max_jobs`` and ``timeout`` are request parameters clamped to server-side maxima;
* a failed tick answers 500 ``{"ok": false, "requestId": ...}``; the error goes
  only to the log, under that request id; the token never reaches a log line.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import hmac
import json
import logging
import math
import os
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jobwarden import errors
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.worker.context import Attempt, Cancelled, Failed, Released, Succeeded
from jobwarden.worker.extensions import Extension, Route
from jobwarden.worker.worker import Worker

logger = logging.getLogger("jobwarden.tick")

#: Runs due schedules once; returns how many slots it enqueued (None: not counted).
SchedulePass = Callable[[], object]

PATH = "/tick"
TOKEN_HEADER = "x-jobwarden-token"
#: Any of these, even empty, means the request came through a proxy: refused.
FORWARDING_HEADERS = frozenset({
    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
    "x-forwarded-prefix", "forwarded", "x-real-ip", "x-client-ip", "cf-connecting-ip",
    "true-client-ip", "x-cluster-client-ip",
})
MIN_TOKEN_LENGTH = 16


def _env_number(name: str, default: float, *, integer: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError as exc:
        raise errors.ConfigurationError(f"{name} must be a number, not {raw!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise errors.ConfigurationError(f"{name} must be a positive number")
    return value


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
        limit = int(_env_number("JOBWARDEN_TICK_MAX_JOBS_LIMIT", 100, integer=True))
        timeout_limit = _env_number("JOBWARDEN_TICK_TIMEOUT_LIMIT", 900.0)
        return cls(
            default_max_jobs=min(int(_env_number("JOBWARDEN_TICK_MAX_JOBS", 10, integer=True)),
                                 limit),
            max_jobs_limit=limit,
            default_timeout=min(_env_number("JOBWARDEN_TICK_TIMEOUT", 300.0), timeout_limit),
            timeout_limit=timeout_limit,
            budget=_env_number("JOBWARDEN_TICK_BUDGET", 60.0),
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

    ``standalone`` is for ``jobwarden tick``: the worker object was built but not
    started, so the ticker runs its recorder for the duration of a tick.
    ``run_schedules`` is the schedule pass of each tick (None: no schedules here).
    """

    def __init__(self, worker: Worker, *, limits: TickLimits | None = None,
                 standalone: bool = False, run_schedules: SchedulePass | None = None) -> None:
        self.worker = worker
        self.run_schedules = run_schedules
        self.db = worker.db
        self.host = worker.host
        self.limits = limits or TickLimits.from_env()
        self._standalone = standalone
        self._running = threading.Lock()

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
            if self.worker.stopping and not self._standalone:
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
        beat = threading.Thread(target=self._watch, args=(attempt, done),
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

    def _watch(self, attempt: Attempt, done: threading.Event) -> None:
        """Heartbeat the tick's attempt and enforce its deadline: the worker's heartbeater."""
        heartbeater = self.worker.heartbeater
        interval = self.worker.settings.heartbeat_interval
        next_beat = time.monotonic() + interval
        while not done.wait(0.05):
            now = time.monotonic()
            heartbeater.enforce_deadlines([attempt], now)
            if now < next_beat:
                continue
            next_beat = now + interval
            heartbeater.beat([attempt])


# -- the HTTP route -------------------------------------------------------------------


def configured_token() -> str | None:
    """The tick token, or None when the route is off. Read per request (rotation)."""
    token = os.environ.get("JOBWARDEN_TICK_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("JOBWARDEN_TICK_TOKEN_FILE", "").strip()
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError as exc:
        logger.warning("cannot read JOBWARDEN_TICK_TOKEN_FILE (%s): the tick route is off",
                       exc.strerror or type(exc).__name__)
        return None


def token_in_query_allowed() -> bool:
    return os.environ.get("JOBWARDEN_TICK_TOKEN_IN_QUERY", "").strip().lower() in (
        "1", "true", "yes", "on")


def token_matches(given: str, expected: str) -> bool:
    """Constant-time: compare fixed-length digests, so neither content nor length leaks."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(),
                               hashlib.sha256(expected.encode()).digest())


def _parameters(query: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    params = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
    if not body:
        return params
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    text = body.decode("utf-8", errors="replace")
    if content_type == "application/json" or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the body is not valid JSON: {exc.msg}") from exc
        if not isinstance(data, dict):
            raise ValueError("the JSON body must be an object")
        params.update({str(k): str(v) for k, v in data.items() if v is not None})
    else:
        params.update({k: v[-1] for k, v in urllib.parse.parse_qs(
            text, keep_blank_values=True).items()})
    return params


def check_max_jobs(value: int, name: str = "max_jobs") -> int:
    """The one rule for a tick's job count, the route's and ``jobwarden tick``'s."""
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


def check_timeout(value: float, name: str = "timeout") -> float:
    """The one rule for a tick's per-job time limit, the route's and ``jobwarden tick``'s."""
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds")
    return value


def _int_param(params: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        if name in params:
            try:
                value = int(params[name])
            except ValueError:
                raise ValueError(f"{name} must be a whole number") from None
            return check_max_jobs(value, name)
    return None


def _float_param(params: Mapping[str, str], name: str) -> float | None:
    if name not in params:
        return None
    try:
        value = float(params[name])
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds") from None
    return check_timeout(value, name)


class TickRoute:
    """The ``/tick`` handler for the worker's HTTP server."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker

    def __call__(self, method: str, path: str, query: str, headers: dict[str, str],
                 body: bytes) -> tuple[int, dict[str, Any]]:
        token = configured_token()
        if token is None:
            return 404, {"ok": False, "error": "not found"}
        if method not in ("GET", "POST"):
            return 405, {"ok": False, "error": "method not allowed (use GET or POST)"}
        lowered = {k.lower(): v for k, v in headers.items()}
        if FORWARDING_HEADERS.intersection(lowered):
            return 403, {"ok": False, "error": "forbidden"}
        query_params = urllib.parse.parse_qs(query, keep_blank_values=True)
        given = lowered.get(TOKEN_HEADER)
        if given is None and token_in_query_allowed() and "token" in query_params:
            given = query_params["token"][-1]
        if given is None or not token_matches(given, token):
            return 403, {"ok": False, "error": "forbidden"}
        try:
            params = _parameters(query, lowered, body)
            max_jobs = _int_param(params, "max_jobs", "maxJobs")
            timeout = _float_param(params, "timeout")
        except ValueError as exc:
            return 400, {"ok": False, "error": str(exc)}
        request_id = uuid.uuid4().hex
        try:
            result = self.ticker.run(max_jobs=max_jobs, timeout=timeout,
                                     request_id=request_id)
        except Exception:
            logger.exception("tick %s failed", request_id)
            return 500, {"ok": False, "requestId": request_id}
        if not result.skipped:
            logger.info("tick %s on %s: ran %d (%s), reaped %d, stopped: %s", request_id,
                        result.host, result.ran, dict(result.outcomes) or "none",
                        result.reaped, result.stopped)
        return 200, result.as_json()


_QUERY_TOKEN = re.compile(r"(?i)([?&;]token=)[^&;\s\"']*")


class RedactTokens(logging.Filter):
    """Keeps the tick token out of log lines (the HTTP server logs request lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            # Formatted here, redacted, and folded into the message: a formatter
            # (text or JSON) must not format the raw exception again.
            message = f"{message}\n{_FORMATTER.formatException(record.exc_info)}"
            record.exc_info, record.exc_text = None, None
        redacted = _QUERY_TOKEN.sub(r"\1[redacted]", message)
        token = configured_token()
        if token:
            redacted = redacted.replace(token, "[redacted]")
        record.msg, record.args = redacted, None
        return True


_FORMATTER = logging.Formatter()


_FILTER = RedactTokens()


class TickExtension(Extension):
    """Serves ``/tick`` on the worker's HTTP server (404 until a token is configured)."""

    def __init__(self, worker: Worker, *, run_schedules: SchedulePass | None = None) -> None:
        self.route = TickRoute(Ticker(worker, run_schedules=run_schedules))
        for name in ("jobwarden.http", "jobwarden.tick"):
            found = logging.getLogger(name)
            if _FILTER not in found.filters:
                found.addFilter(_FILTER)
        token = configured_token()
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            logger.warning("the tick token is shorter than %d characters: use a long random "
                           "one", MIN_TOKEN_LENGTH)

    def routes(self) -> Mapping[str, Route]:
        return {PATH: self.route}
