"""The host registry: who is working, per-host caps, and drain-first deploys.

Why a registry at all: a rolling deploy must not cut jobs in half. The operator
(or ``jobwarden drain``) marks a host draining; its workers claim nothing new,
keep heartbeating and finish what they run; the deploy replaces the host once
``running`` is zero. Everything a decision depends on is judged in SQL on the
database clock -- whether a drain is still in force, the cap, the running count
-- so no application server's clock or memory is trusted.

The pieces:

* :class:`Hosts` (``client.hosts``): drain, resume, status, waiting until idle.
* :class:`~jobwarden.extensions.hosts.HostMembership` (``extensions/hosts.py``): one per
  process, a worker extension.
  It registers the process (a ``workers`` row) and its host (a ``hosts`` row;
  several processes may share one host name), refreshes both every heartbeat
  interval, prunes hosts and processes nobody has seen for a while (their jobs
  are left to the reaper, which judges them by their own heartbeats), gates the
  claim loop, and drains itself on SIGTERM.

The cap is enforced by the claim itself (``JobsTable.claim(host_cap=True)``):
the host row is locked (shared; a capped host's claims also queue on its advisory
lock), then at most ``cap - running`` rows are claimed in the same transaction,
so it holds across every process and tick on the host. The gate here is only a
cheap early "no" (draining, stopping) and turns prefetch off
on a capped host, where a prefetched job would hold a unit of the cap idle.

Self-drain on SIGTERM is per process: the process row is marked ``stopping``
and the process stops claiming; the host row is marked draining (reason
``shutdown``) only when no sibling process on that host is still working, so one
pod's stopping process never stops the others. A ``shutdown`` drain is lifted by
the next process that registers on that host name; a drain set by an operator or
an admin survives a restart until it is resumed or expires.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jobwarden import errors, textrules
from jobwarden.structs.hosts import HostCount, HostStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database

logger = logging.getLogger("jobwarden.hosts")

#: Default drain expiry: a forgotten drain lifts by itself after an hour.
DEFAULT_DRAIN_EXPIRES = 3600.0
#: The reason a worker gives when it drains itself on SIGTERM.
SHUTDOWN_REASON = "shutdown"
MAX_REASON_LENGTH = 200


#: The largest cap: the column is PostgreSQL's integer (a larger one crashed the
#: worker's registration thread, exit 70, instead of a configuration error).
MAX_CAP = 2**31 - 1


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
    if value > MAX_CAP:
        raise errors.ConfigurationError(f"{source} must be at most {MAX_CAP}")
    return value or None


def _check_target(host: str | None, pool: str | None) -> None:
    if (host is None) == (pool is None):
        raise ValueError("name exactly one of host= or pool=")
    for label, value in (("host", host), ("pool", pool)):
        if value is not None and not value.strip():
            raise ValueError(f"{label} must not be blank")
        if value is not None:
            textrules.check_text(value, label)


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
