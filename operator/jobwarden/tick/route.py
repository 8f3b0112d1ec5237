"""The ``/tick`` HTTP route: its token security, and the extension that serves it.

For places that can only run cron + curl: a request runs one tick
(:mod:`jobwarden.tick.engine`) on the worker that serves it.

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

import hashlib
import hmac
import json
import logging
import math
import os
import re
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any

from jobwarden.tick.engine import SchedulePass, Ticker
from jobwarden.worker.extensions import Extension, Route
from jobwarden.worker.handle import WorkerHandle

logger = logging.getLogger("jobwarden.tick")

PATH = "/tick"
TOKEN_HEADER = "x-jobwarden-token"
#: Any of these, even empty, means the request came through a proxy: refused.
FORWARDING_HEADERS = frozenset({
    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
    "x-forwarded-prefix", "forwarded", "x-real-ip", "x-client-ip", "cf-connecting-ip",
    "true-client-ip", "x-cluster-client-ip",
})
MIN_TOKEN_LENGTH = 16

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

    def __init__(self, worker: WorkerHandle, *, run_schedules: SchedulePass | None = None) -> None:
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
