"""The host registry: who is working, per-host caps, and drain-first deploys.

Why a registry at all: a rolling deploy must not cut jobs in half. The operator
(or ``jobwarden drain``) marks a host draining; its workers claim nothing new,
keep heartbeating and finish what they run; the deploy replaces the host once
``running`` is zero. Everything a decision depends on is judged in SQL on the
database clock -- whether a drain is still in force, the cap, the running count
-- so no application server's clock or memory is trusted.

The pieces:

* :class:`Hosts` (``client.hosts``): drain, resume, status, waiting until idle.
* :class:`HostRegistry`: one per worker process, a worker extension.
  It registers the process (a ``workers`` row) and its host (a ``hosts`` row;
  several processes may share one host name), refreshes both every heartbeat
  interval, prunes hosts and processes nobody has seen for a while (their jobs
  are left to the reaper, which judges them by their own heartbeats), gates the
  claim loop, and drains itself on SIGTERM.

The cap is enforced by the claim itself (``JobsTable.claim(host_cap=True)``):
the host row is locked, then at most ``cap - running`` rows are claimed in the
same transaction, so it holds across every process and tick on the host. The
gate here is only a cheap early "no" (draining, stopping) and turns prefetch off
on a capped host, where a prefetched job would hold a unit of the cap idle.

Self-drain on SIGTERM is per process: the process row is marked ``stopping``
and the process stops claiming; the host row is marked draining (reason
``shutdown``) only when no sibling process on that host is still working, so one
pod's stopping process never stops the others. A ``shutdown`` drain is lifted by
the next process that registers on that host name; a drain set by an operator or
an admin survives a restart until it is resumed or expires.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobwarden import errors, metrics
from jobwarden.structs.hosts import HostCount, HostStatus
from jobwarden.worker.extensions import Extension, PeriodicTask

if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.settings import WorkerSettings
    from jobwarden.worker.worker import Worker

logger = logging.getLogger("jobwarden.hosts")

#: Default drain expiry: a forgotten drain lifts by itself after an hour.
DEFAULT_DRAIN_EXPIRES = 3600.0
#: The reason a worker gives when it drains itself on SIGTERM.
SHUTDOWN_REASON = "shutdown"
MAX_REASON_LENGTH = 200


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise errors.ConfigurationError(f"{name} must be a number, not {raw!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise errors.ConfigurationError(f"{name} must be a non-negative number")
    return value


def parse_cap(raw: object, *, source: str = "host cap") -> int | None:
    """A cap setting: a positive integer, or 0 / empty / None for "no cap"."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError as exc:
        raise errors.ConfigurationError(f"{source} must be an integer, not {raw!r}") from exc
    if value < 0:
        raise errors.ConfigurationError(f"{source} must not be negative")
    return value or None


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostSettings:
    """Registry settings, from the worker's settings with environment fallbacks."""

    #: At most this many jobs at once on this host, across its processes
    #: (``--host-cap`` / ``JOBWARDEN_HOST_CAP``; 0 or unset = the pool's default).
    cap: int | None = None
    #: A process or host not seen for this long is pruned
    #: (``JOBWARDEN_HOST_STALE_SECONDS``, default 300).
    stale_after: float = 300.0
    #: How often each process prunes stale rows (``JOBWARDEN_HOST_PRUNE_SECONDS``).
    prune_interval: float = 60.0

    @classmethod
    def for_worker(cls, settings: WorkerSettings) -> HostSettings:
        configured = settings.host_cap
        cap = parse_cap(configured) if configured is not None else parse_cap(
            os.environ.get("JOBWARDEN_HOST_CAP"), source="JOBWARDEN_HOST_CAP")
        stale = _env_float("JOBWARDEN_HOST_STALE_SECONDS", 300.0)
        # A live process refreshes every heartbeat interval: never call it stale sooner
        # than a few of those.
        stale = max(stale, settings.heartbeat_interval * 5)
        return cls(cap=cap, stale_after=stale,
                   prune_interval=_env_float("JOBWARDEN_HOST_PRUNE_SECONDS", 60.0))


def _check_target(host: str | None, pool: str | None) -> None:
    if (host is None) == (pool is None):
        raise ValueError("name exactly one of host= or pool=")
    for label, value in (("host", host), ("pool", pool)):
        if value is not None and not value.strip():
            raise ValueError(f"{label} must not be blank")


class Hosts:
    """``client.hosts``: drain, resume and inspect hosts."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def drain(self, *, host: str | None = None, pool: str | None = None,
              expires_in: float = DEFAULT_DRAIN_EXPIRES, reason: str = "drain") -> list[str]:
        """Stop a host (or every host of a pool) from claiming; returns the hosts draining.

        Running jobs go on (heartbeats included) until they finish. The drain lifts
        by itself after ``expires_in`` seconds (0 = only ``resume`` lifts it). A pool
        drain also applies to hosts that register in the pool while it is in force.
        """
        _check_target(host, pool)
        if not math.isfinite(expires_in) or expires_in < 0:
            raise ValueError("expires_in must be a non-negative number of seconds")
        reason = reason.strip() or "drain"
        if len(reason) > MAX_REASON_LENGTH:
            raise ValueError(f"reason must be at most {MAX_REASON_LENGTH} characters")
        drained = self._db.hosts.drain(host=host, pool=pool, reason=reason,
                                       expires_in=expires_in)
        logger.info("drain (%s) of %s: %s", reason, f"host {host}" if host else f"pool {pool}",
                    ", ".join(drained) or "no registered host")
        return drained

    def resume(self, *, host: str | None = None, pool: str | None = None) -> list[str]:
        """Lift a drain (the host's own, or the pool's and every host's in it)."""
        _check_target(host, pool)
        resumed = self._db.hosts.resume(host=host, pool=pool)
        logger.info("resumed %s", ", ".join(resumed) or "no registered host")
        return resumed

    def status(self, *, host: str | None = None, pool: str | None = None) -> list[HostStatus]:
        return self._db.hosts.status(host=host, pool=pool)

    def names(self, *, host: str | None = None, pool: str | None = None) -> list[str]:
        return self._db.hosts.names(host=host, pool=pool)

    def running(self, hosts: Sequence[str]) -> dict[str, int]:
        """Jobs still processing per host name (0 for an idle or unknown host)."""
        return self._db.hosts.running(hosts)

    def set_pool_cap(self, pool: str, cap: int | None) -> None:
        """The default per-host cap of a pool (None or 0 = no cap); a host's own cap wins."""
        self._db.hosts.set_pool_cap(pool=pool, cap=parse_cap(cap))

    def counts(self) -> list[HostCount]:
        return self._db.hosts.counts()

    def wait_idle(self, hosts: Sequence[str], *, timeout: float, interval: float = 0.5,
                  on_progress: Callable[[dict[str, int]], None] | None = None) -> bool:
        """Poll until no job runs on ``hosts``; False when ``timeout`` passed first.

        ``on_progress`` gets the running count per host at every poll. Jobs a host
        could not finish before it went away count until the reaper reclaims them.
        """
        deadline = time.monotonic() + timeout
        while True:
            running = self.running(hosts)
            if on_progress is not None:
                on_progress(running)
            if not any(running.values()):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(interval, left))


class HostRegistry(Extension):
    """One worker process's membership in the registry, and its claim gate.

    A worker extension: it gates claims (drain, stopping, no prefetch under a
    cap), makes claims lock the host row (``caps_claims``), refreshes and prunes
    periodically, drains itself when a stop begins and deregisters at the end.
    """

    def __init__(self, worker: Worker, settings: HostSettings | None = None) -> None:
        self.worker = worker
        self.db = worker.db
        self.host = worker.host
        self.pool = worker.settings.pool
        self.settings = settings or HostSettings.for_worker(worker.settings)
        self.worker_id = uuid.uuid4()
        self.registered = False
        self.stopping = False
        #: Last known state of the host (refreshed every heartbeat interval). The
        #: claim decides for itself under the row lock; these only spare round trips.
        self.draining = False
        self.cap: int | None = self.settings.cap

    # -- the extension's hooks ----------------------------------------------------------

    @property
    def caps_claims(self) -> bool:
        return True

    def claim_gate(self, free: int) -> int:
        return self.gate(free)

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return (
            PeriodicTask(name="hosts-refresh", interval=self.worker.settings.heartbeat_interval,
                         run=self.refresh),
            PeriodicTask(name="hosts-prune", interval=self.settings.prune_interval,
                         run=self.prune),
        )

    def outcomes_written(self) -> None:
        """A unit of the cap is free: wake this host's other processes at once."""
        if self.cap is not None and self.registered:
            self.db.hosts.notify_slot_freed(host=self.host)

    def on_stopping(self) -> None:
        self.self_drain()

    def on_stopped(self) -> None:
        self.deregister()

    # -- lifecycle ---------------------------------------------------------------------

    def register(self) -> None:
        self.db.hosts.register(
            host=self.host, pool=self.pool, code_version=self.worker.settings.code_version,
            cap=self.settings.cap, worker_id=self.worker_id, pid=os.getpid(),
            concurrency=self.worker.settings.concurrency, queues=self.worker.settings.queues,
        )
        self.registered = True
        logger.info("registered host %s (pool %s, process %s, cap %s)", self.host, self.pool,
                    self.worker_id, self.settings.cap or "pool default")
        self.refresh()

    def refresh(self) -> None:
        """Periodic: we are alive; learn the host's drain and cap; observe drain metrics."""
        if self.stopping:
            return
        if not self.registered:
            self.register()  # refreshes once registered
            return
        state = self.db.hosts.refresh(host=self.host, worker_id=self.worker_id)
        if state is None:
            logger.warning("host %s / process %s was pruned (not seen for a while): "
                           "registering again", self.host, self.worker_id)
            self.registered = False
            self.db.hosts.register(
                host=self.host, pool=self.pool, code_version=self.worker.settings.code_version,
                cap=self.settings.cap, worker_id=self.worker_id, pid=os.getpid(),
                concurrency=self.worker.settings.concurrency,
                queues=self.worker.settings.queues)
            self.registered = True
            state = self.db.hosts.refresh(host=self.host, worker_id=self.worker_id)
            if state is None:
                return
        if state.draining != self.draining:
            logger.info("host %s %s", self.host, "is draining" if state.draining else "resumed")
        self.draining = state.draining
        self.cap = state.cap
        metrics.HOST_DRAINING.labels(self.pool).set(1 if state.draining else 0)
        if state.draining and state.running == 0 and not state.idle_marked:
            self._observe_idle()

    def _observe_idle(self) -> None:
        idle = self.db.hosts.mark_idle(host=self.host)
        if idle is not None:
            metrics.DRAIN_DURATION.labels(idle.pool).observe(idle.seconds)
            logger.info("host %s drained: idle %.1fs after the drain began", self.host,
                        idle.seconds)

    def prune(self) -> None:
        processes, hosts = self.db.hosts.prune(stale_seconds=self.settings.stale_after)
        if processes or hosts:
            logger.info("pruned %d stale process(es) and %d stale host(s); their jobs are "
                        "left to the reaper", processes, hosts)

    def gate(self, free: int) -> int:
        """How many jobs the fetch loop may claim now (the claim itself enforces the cap)."""
        if self.stopping or self.worker.stopping:
            return 0
        if not self.registered:
            self.register()
        if self.draining:
            return 0
        if self.cap is not None:
            # No prefetch on a capped host: a claimed-but-waiting job would hold a
            # unit of the host's cap that a sibling process could be running.
            unclaimed_slots = self.worker.settings.concurrency - self.worker.capacity.in_flight
            return max(0, min(free, unclaimed_slots, self.cap))
        return free

    # -- shutdown ------------------------------------------------------------------------

    def self_drain(self) -> None:
        """SIGTERM: stop claiming; drain the host too when we are its last working process."""
        self.stopping = True
        if not self.registered:
            return
        try:
            marked = self.db.hosts.stop_worker(
                host=self.host, worker_id=self.worker_id,
                grace_seconds=max(self.worker.settings.shutdown_grace, 1.0) + 60.0,
                stale_seconds=self.settings.stale_after,
            )
        except errors.JobwardenError as exc:
            logger.warning("could not record the self-drain of %s: %s", self.host, exc)
            return
        if marked:
            self.draining = True
            metrics.HOST_DRAINING.labels(self.pool).set(1)
        logger.info("process %s of host %s is draining itself%s", self.worker_id, self.host,
                    " (and the host)" if marked else "")

    def deregister(self) -> None:
        """Clean exit: remove this process (and the host row when it was the last one)."""
        self.stopping = True
        if not self.registered:
            return
        try:
            self._observe_idle()
            host_gone = self.db.hosts.deregister(host=self.host, worker_id=self.worker_id)
        except errors.JobwardenError as exc:
            logger.warning("could not deregister %s (it will be pruned): %s", self.host, exc)
            return
        self.registered = False
        metrics.HOST_DRAINING.labels(self.pool).set(0)
        logger.info("deregistered process %s%s", self.worker_id,
                    f" and host {self.host}" if host_gone else "")
