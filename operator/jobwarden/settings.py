"""Settings: the one path from flags and ``JOBWARDEN_*`` variables to typed values.

Every command reads its environment through the parsers here (``env_text``,
``env_csv``, ``env_int``, ``env_number``, ``env_duration``), so a bad value is
refused the same way everywhere: a :class:`~jobwarden.errors.ConfigurationError`
naming the variable. :meth:`WorkerSettings.from_env` is how ``jobwarden worker``
builds a worker's settings (a given flag wins, else its variable, else the
default); the operator's :class:`~jobwarden.controller.config.OperatorConfig`,
a tick's limits and a host's registry settings read theirs with the same
parsers. Environment variables use the ``JOBWARDEN_`` prefix so a Kubernetes
pod spec can set them; defaults are documented here and in docs/cli.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import socket
from collections.abc import Mapping
from typing import Any, Literal

from jobwarden import errors, textrules

Isolation = Literal["thread", "process"]

#: Seconds per unit suffix of a duration.
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h|d)?\s*")
#: The largest count a setting takes (PostgreSQL's integer; a larger one failed in
#: the database, in a worker thread: exit 70 instead of a configuration error).
MAX_COUNT = 2**31 - 1
#: The longest duration taken: 100 years. Longer ones overflowed where they were used
#: (a PostgreSQL interval or timestamp, a timer's time_t): a traceback or a crashed
#: worker thread instead of a one-line refusal.
MAX_DURATION_SECONDS = 36500 * 86400.0


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``1.5``, ``90s``, ``15m``, ``1h``, ``2d`` or ``250ms``.

    A bare number is seconds (what every flag took before units were accepted).
    Flags (``cli/arguments.py``) and ``JOBWARDEN_*`` durations share this rule.
    """
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ValueError(f"not a duration: {textrules.echo(text)} "
                         "(use seconds, or 90s, 15m, 1h, 2d)")
    value = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if not math.isfinite(value):
        raise ValueError(f"not a finite duration: {textrules.echo(text)}")
    if value > MAX_DURATION_SECONDS:
        raise ValueError(f"not a duration of at most 100 years (36500d): {textrules.echo(text)}")
    return value


def _raw(name: str, env: Mapping[str, str] | None) -> str:
    return (os.environ if env is None else env).get(name, "").strip()


def env_text(name: str, default: str, *, env: Mapping[str, str] | None = None) -> str:
    """A text setting: the variable's value, stripped, or ``default`` when unset or blank."""
    return _raw(name, env) or default


def env_csv(name: str, *, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """A comma-separated list (queues, apps, namespaces); blanks dropped; () when unset."""
    return tuple(part.strip() for part in _raw(name, env).split(",") if part.strip())


def env_int(name: str, default: int | None, *, env: Mapping[str, str] | None = None,
            what: str = "a whole number") -> int | None:
    """A whole-number setting (any sign: the caller's type checks its range), or ``default``."""
    raw = _raw(name, env)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.ConfigurationError(
            f"{name} must be {what}, not {textrules.echo(raw)}") from None


def env_duration(name: str, default: float, *, env: Mapping[str, str] | None = None) -> float:
    """A duration setting with an optional unit (``90s``, ``15m``; see :func:`parse_duration`)."""
    raw = _raw(name, env)
    if not raw:
        return default
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise errors.ConfigurationError(f"{name}: {exc}") from None


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


PREPARED_STATEMENTS_ENV = "JOBWARDEN_PREPARED_STATEMENTS"


def env_prepare_threshold() -> int | None:
    """Server-side prepared statements: off unless ``JOBWARDEN_PREPARED_STATEMENTS`` says.

    Off by default because a transaction-mode pooler (PgBouncer before 1.21, or
    1.21+ without ``max_prepared_statements``) hands each transaction to any
    server connection, where psycopg's ``_pg3_N`` statement does not exist. ``on``
    prepares a query after 5 runs (psycopg's default); a number sets that count
    (0: prepare at once); ``off`` never prepares. The database layer reads it
    when a ``Database`` is made without an explicit threshold.
    """
    raw = _raw(PREPARED_STATEMENTS_ENV, None).lower()
    if raw in ("", "off", "false", "no", "none"):
        return None
    if raw in ("on", "true", "yes"):
        return 5
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.ConfigurationError(
            f"{PREPARED_STATEMENTS_ENV}={raw!r}: use on, off or a number of runs (0 or more)")
    return value


def env_listen_dsn() -> str | None:
    """``JOBWARDEN_LISTEN_DSN``: a direct DSN for the LISTEN connection, or None.

    Why: behind a transaction-mode pooler (PgBouncer) LISTEN hears nothing, so
    wake-ups are lost and every worker polls; a separate DSN straight to the server
    (one connection per process) keeps them, while every other call goes through
    the pooler.
    """
    return _raw("JOBWARDEN_LISTEN_DSN", None) or None


def env_schema() -> str:
    return env_text("JOBWARDEN_SCHEMA", "jobwarden")


def default_host_name() -> str:
    """Pod name in Kubernetes (``POD_NAME`` from the downward API), else the hostname."""
    return (
        os.environ.get("JOBWARDEN_HOST")
        or os.environ.get("POD_NAME")
        or _hostname()
    )


@functools.cache
def process_host_name() -> str:
    """:func:`default_host_name`, read once per process: a process's pod name and
    hostname do not change while it runs, and every lease guard names its host
    (two environment look-ups each, a measurable share of a lease pair's client CPU)."""
    return default_host_name()


@functools.cache
def _hostname() -> str:
    # Asked once per process: every lease guard names its host (a system call each).
    return socket.gethostname()


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
    #: The pace of an idle worker (nothing claimed, LISTEN verified): its claim polls
    #: back off from ``poll_interval`` up to this, and its host-row refresh and
    #: reaper run at most this often. None = ``max(60 x poll_interval,
    #: heartbeat_interval, reap_interval)`` (60 s with the defaults; see
    #: :attr:`idle_seconds` and docs/capacity-planning.md).
    idle_interval: float | None = None
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
    #: export the database-wide gauges this often (0 = never; jobwarden.maintenance.gauges).
    gauge_interval: float = 15.0
    #: /healthz fails while the heartbeat loop, a claim round or the recorder has
    #: been in one round longer than this (a wedged worker is restarted; a round
    #: that failed because the database is away counts as done: see looping.Progress).
    stall_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise errors.ConfigurationError("concurrency must be at least 1")
        if self.concurrency > MAX_COUNT:
            raise errors.ConfigurationError(f"concurrency must be at most {MAX_COUNT}")
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise errors.ConfigurationError(f"the HTTP port must be from 0 to 65535, "
                                            f"not {self.http_port}")
        if self.heartbeat_interval <= 0 or self.heartbeat_grace <= self.heartbeat_interval:
            raise errors.ConfigurationError(
                "heartbeat grace must be longer than the heartbeat interval"
            )
        if self.idle_interval is not None and not self.idle_interval > 0:
            raise errors.ConfigurationError("the idle interval must be a positive duration")
        if not self.stall_seconds > 0:
            raise errors.ConfigurationError("the stall bound must be a positive duration")
        if self.isolation not in ("thread", "process"):
            raise errors.ConfigurationError("isolation must be 'thread' or 'process'")

    @classmethod
    def from_env(cls, *, env: Mapping[str, str] | None = None,
                 **given: Any) -> WorkerSettings:
        """A worker's settings: each ``given`` value that is not None, else its
        ``JOBWARDEN_*`` variable, else the default (docs/cli.md, ``jobwarden worker``).
        """
        values: dict[str, Any] = {
            "apps": env_csv("JOBWARDEN_APPS", env=env),
            "queues": env_csv("JOBWARDEN_QUEUES", env=env),
            "concurrency": env_int("JOBWARDEN_CONCURRENCY", 10, env=env),
            "isolation": env_text("JOBWARDEN_ISOLATION", "thread", env=env),
            "pool": env_text("JOBWARDEN_POOL", "default", env=env),
            "http_port": env_int("JOBWARDEN_HTTP_PORT", None, env=env),
            "failure_hook": _raw("JOBWARDEN_FAILURE_HOOK", env) or None,
        }
        for field, variable in _WORKER_DURATIONS.items():
            values[field] = env_duration(variable, _WORKER_DEFAULTS[field], env=env)
        if _raw("JOBWARDEN_IDLE_INTERVAL", env):
            values["idle_interval"] = env_duration("JOBWARDEN_IDLE_INTERVAL", 60.0, env=env)
        for field, value in given.items():
            if value is None:
                continue
            values[field] = value
        return cls(**values)

    @property
    def idle_seconds(self) -> float:
        """The idle pace (:attr:`idle_interval`, or its default from the other intervals).

        Why derived: an idle worker's periodic transactions are what a fleet costs a
        database at rest (issue 31), and a deployment that shortened its intervals
        (the tests, a latency-bound setup) keeps a proportionally short idle pace.
        """
        if self.idle_interval is not None:
            return self.idle_interval
        return max(60 * self.poll_interval, self.heartbeat_interval, self.reap_interval)

    @property
    def max_prefetch(self) -> int:
        """The most jobs ever claimed ahead of free slots."""
        if self.prefetch is not None:
            return max(self.prefetch, 0)
        return max(4 * self.concurrency, 16)


#: With automatic prefetch, keep about this much work claimed ahead.
PREFETCH_WORK_SECONDS = 0.1


#: The worker's durations and the variables they are read from.
_WORKER_DURATIONS = {
    "poll_interval": "JOBWARDEN_POLL_INTERVAL",
    "heartbeat_interval": "JOBWARDEN_HEARTBEAT_INTERVAL",
    "heartbeat_grace": "JOBWARDEN_HEARTBEAT_GRACE",
    "reap_interval": "JOBWARDEN_REAP_INTERVAL",
    "shutdown_grace": "JOBWARDEN_SHUTDOWN_GRACE",
    "schedule_check_seconds": "JOBWARDEN_SCHEDULE_CHECK_SECONDS",
    "gauge_interval": "JOBWARDEN_GAUGE_INTERVAL",
    "stall_seconds": "JOBWARDEN_STALL_SECONDS",
}
_WORKER_DEFAULTS: dict[str, float] = {
    field.name: field.default for field in dataclasses.fields(WorkerSettings)
    if field.name in _WORKER_DURATIONS and isinstance(field.default, float)
}
