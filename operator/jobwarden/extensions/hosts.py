"""A worker process's membership in the host registry: the worker extension.

See :mod:`jobwarden.coordination.hosts` for the registry itself (drain, resume, status, the
cap). This extension registers the process and its host, refreshes both every
heartbeat interval, prunes processes and hosts nobody has seen for a while,
gates the claim loop (drain, stopping, no prefetch under a cap), makes claims
honour the host's cap, and drains itself when the worker stops. Its own module,
apart from ``coordination/hosts.py``: the client (and through it the operator)
uses the registry without importing anything of the worker.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobwarden import errors, settings
from jobwarden.coordination.hosts import parse_cap
from jobwarden.observability import metrics
from jobwarden.worker.extensions import Extension, PeriodicTask

if TYPE_CHECKING:
    from jobwarden.settings import WorkerSettings
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["HostMembership", "HostSettings"]

logger = logging.getLogger("jobwarden.hosts")


def _env_seconds(name: str, default: float) -> float:
    return settings.env_number(name, default, allow_zero=True)


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
        stale = _env_seconds("JOBWARDEN_HOST_STALE_SECONDS", 300.0)
        # A live process refreshes every heartbeat interval: never call it stale sooner
        # than a few of those (an idle one refreshes at least five times per stale period).
        stale = max(stale, settings.heartbeat_interval * 5)
        return cls(cap=cap, stale_after=stale,
                   prune_interval=_env_seconds("JOBWARDEN_HOST_PRUNE_SECONDS", 60.0))



class HostMembership(Extension):
    """One worker process's membership in the registry, and its claim gate.

    A worker extension: it gates claims (drain, stopping, no prefetch under a
    cap), makes claims lock the host row (``caps_claims``), refreshes and prunes
    periodically, drains itself when a stop begins and deregisters at the end.
    """

    def __init__(self, worker: WorkerHandle, settings: HostSettings | None = None) -> None:
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
        #: When (monotonic) the host row was last refreshed (see :meth:`refresh_due`).
        self.refreshed_at = -math.inf

    # -- the extension's hooks ----------------------------------------------------------

    @property
    def caps_claims(self) -> bool:
        return True

    def claim_gate(self, free: int) -> int:
        return self.gate(free)

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return (
            PeriodicTask(name="hosts-refresh", interval=self.worker.settings.heartbeat_interval,
                         run=self.refresh_due),
            PeriodicTask(name="hosts-prune", interval=self.settings.prune_interval,
                         run=self.prune),
        )

    def outcomes_written(self) -> None:
        """A unit of the cap is free: claim again at once, here and in the host's other
        processes (only under a cap: see ``Claimer.outcomes_written``)."""
        if self.cap is not None and self.registered:
            self.worker.wake()
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

    def refresh_due(self) -> None:
        """The periodic refresh: every heartbeat interval while this process holds a
        claim or its host drains, else at the idle pace (``idle_seconds``).

        Why: at rest the refresh only says "alive" (the claim itself reads the drain
        and the cap under the host row's lock), and every idle worker's refresh is a
        transaction the database pays (issue 31). The stale period of the registry is
        never outrun: an idle process refreshes at least five times per stale period
        (``JOBWARDEN_HOST_STALE_SECONDS``; give every process of a database the same),
        since any process prunes a host it thinks stale, and a pruned host claims
        nothing until it registers again.
        """
        idle = self.worker.in_flight() == 0 and not self.draining
        pace = min(self.worker.settings.idle_seconds, self.settings.stale_after / 5) \
            if idle else 0.0
        if time.monotonic() - self.refreshed_at >= pace * 0.95:
            self.refresh()

    def refresh(self) -> None:
        """Periodic: we are alive; learn the host's drain and cap; observe drain metrics."""
        if self.stopping:
            return
        if not self.registered:
            self.register()  # refreshes once registered
            return
        state = self.db.hosts.refresh(host=self.host, worker_id=self.worker_id)
        self.refreshed_at = time.monotonic()
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
        metrics.HOST_DRAINING_SECONDS.labels(self.pool).set(state.draining_seconds)
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
        if self.stopping or self.worker.stopping():
            return 0
        if not self.registered:
            self.register()
        if self.draining:
            return 0
        if self.cap is not None:
            # No prefetch on a capped host: a claimed-but-waiting job would hold a
            # unit of the host's cap that a sibling process could be running.
            unclaimed_slots = self.worker.settings.concurrency - self.worker.in_flight()
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
        metrics.HOST_DRAINING_SECONDS.labels(self.pool).set(0)
        logger.info("deregistered process %s%s", self.worker_id,
                    f" and host {self.host}" if host_gone else "")
