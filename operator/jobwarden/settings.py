"""Settings as grouped dataclasses, read from flags with environment fallbacks.

Every default is documented here and in docs/configuration.md. Environment
variables use the ``JOBWARDEN_`` prefix so a Kubernetes pod spec can set them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from collections.abc import Mapping
from typing import Literal

from jobwarden import errors

Isolation = Literal["thread", "process"]


def env_dsn() -> str | None:
    """The DSN from ``JOBWARDEN_DSN``, or from the file ``JOBWARDEN_DSN_FILE`` names.

    A file is how Kubernetes mounts a Secret without putting the DSN in the
    pod's environment (where it would show in ``kubectl describe``).
    """
    dsn = os.environ.get("JOBWARDEN_DSN")
    if dsn:
        return dsn
    path = os.environ.get("JOBWARDEN_DSN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError as exc:
            raise errors.ConfigurationError(f"cannot read JOBWARDEN_DSN_FILE {path!r}: {exc}") \
                from exc
    return None


def env_number(name: str, default: float, *, integer: bool = False,
               allow_zero: bool = False, minimum: float | None = None,
               env: Mapping[str, str] | None = None) -> float:
    """A number from the environment (``default`` when unset or blank).

    The one parser of numeric ``JOBWARDEN_*`` settings (worker, tick, hosts,
    operator): a value that is not a finite number, or is negative (or zero,
    unless ``allow_zero``), or below ``minimum`` when one is given, is a
    :class:`~jobwarden.errors.ConfigurationError` naming the variable. ``env``
    reads another mapping than ``os.environ`` (the operator's tests).
    """
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError as exc:
        kind = "a whole number" if integer else "a number"
        raise errors.ConfigurationError(f"{name} must be {kind}, not {raw!r}") from exc
    if minimum is not None:
        if not (math.isfinite(value) and value >= minimum):
            raise errors.ConfigurationError(f"{name} must be at least {minimum}, not {raw!r}")
        return value
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise errors.ConfigurationError(
            f"{name} must be a {'non-negative' if allow_zero else 'positive'} number")
    return value


def env_schema() -> str:
    return os.environ.get("JOBWARDEN_SCHEMA", "jobwarden")


def default_host_name() -> str:
    """Pod name in Kubernetes (``POD_NAME`` from the downward API), else the hostname."""
    return (
        os.environ.get("JOBWARDEN_HOST")
        or os.environ.get("POD_NAME")
        or socket.gethostname()
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatabaseSettings:
    dsn: str
    schema: str = "jobwarden"
    #: psycopg prepares a query after this many runs; None (the default, safe
    #: behind any transaction-mode pooler) never prepares. The Database reads
    #: JOBWARDEN_PREPARED_STATEMENTS (on | off | N), see docs/operations.md.
    prepare_threshold: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    #: Queues to claim from; empty means every queue.
    queues: tuple[str, ...] = ()
    #: Attempts running at once in this process.
    concurrency: int = 10
    #: Extra claimed-but-not-started jobs kept ready. None = automatic: about
    #: PREFETCH_WORK_SECONDS of work, judged from recent job durations, so short
    #: jobs are claimed in batches and long jobs are never hoarded by one worker.
    prefetch: int | None = None
    isolation: Isolation = "thread"
    host: str = dataclasses.field(default_factory=default_host_name)
    pool: str = "default"
    code_version: str = dataclasses.field(
        default_factory=lambda: os.environ.get("JOBWARDEN_CODE_VERSION", "")
    )
    #: Port of /metrics, /healthz, /readyz (and /tick); None = no HTTP server.
    http_port: int | None = None
    http_host: str = "0.0.0.0"
    #: Idle poll period; NOTIFY wakes the worker sooner.
    poll_interval: float = 1.0
    #: How often every running claim is heartbeated.
    heartbeat_interval: float = 5.0
    #: A claim whose heartbeats stop for this long is reaped (by any process).
    heartbeat_grace: float = 60.0
    #: How often this process runs the reaper.
    reap_interval: float = 10.0
    #: After SIGTERM: how long running jobs may take before the process exits anyway.
    shutdown_grace: float = 30.0
    #: Stored results larger than this (bytes of JSON) are truncated with a marker.
    result_max_bytes: int = 65536
    #: App modules to import (they define jobs and hooks).
    apps: tuple[str, ...] = ()
    #: "module:function" called with a FailureEvent for every failed attempt.
    failure_hook: str | None = None
    #: At most this many jobs at once on this host across all its processes
    #: (None = the pool's default from the host registry; 0 = no cap).
    host_cap: int | None = None
    #: Run due schedules at most this often (0 = off).
    schedule_check_seconds: float = 15.0
    #: With an HTTP port: compete for the gauge lease and, while holding it,
    #: export the database-wide gauges this often (0 = never; jobwarden.gauges).
    gauge_interval: float = 15.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise errors.ConfigurationError("concurrency must be at least 1")
        if self.heartbeat_interval <= 0 or self.heartbeat_grace <= self.heartbeat_interval:
            raise errors.ConfigurationError(
                "heartbeat grace must be longer than the heartbeat interval"
            )
        if self.isolation not in ("thread", "process"):
            raise errors.ConfigurationError("isolation must be 'thread' or 'process'")

    @property
    def max_prefetch(self) -> int:
        """The most jobs ever claimed ahead of free slots."""
        if self.prefetch is not None:
            return max(self.prefetch, 0)
        return max(4 * self.concurrency, 16)


#: With automatic prefetch, keep about this much work claimed ahead.
PREFETCH_WORK_SECONDS = 0.1
