"""Rows of the host registry, as frozen dataclasses."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostState:
    """What one process learns about its host at each refresh (as a claim would judge it)."""

    pool: str
    cap: int | None
    draining: bool
    running: int
    idle_marked: bool
    #: Seconds since the current drain began (database clock); 0 when not draining.
    draining_seconds: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostStatus:
    """One host as ``client.hosts.status()`` and ``jobwarden status`` show it."""

    name: str
    pool: str
    code_version: str
    #: Effective per-host cap (the host's own, else its pool's); None = no cap.
    cap: int | None
    #: Jobs in ``processing`` claimed by this host (from the jobs table, never stored).
    running: int
    #: A drain is in force (an expired drain is not).
    draining: bool
    drain_reason: str | None
    drain_started_at: datetime.datetime | None
    drain_expires_at: datetime.datetime | None
    drain_idle_at: datetime.datetime | None
    started_at: datetime.datetime
    last_seen_at: datetime.datetime
    #: Seconds since the host was last seen, on the database clock.
    seen_seconds_ago: float
    processes: int
    stopping_processes: int
    slots: int

    @property
    def state(self) -> str:
        if self.draining:
            return "draining"
        if self.processes == 0:
            return "offline"  # no worker process (gone, or a host only ticks reach)
        return "active"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = value.isoformat() if isinstance(value, datetime.datetime) else value
        out["state"] = self.state
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostCount:
    """Hosts per pool and state, for the ``jobwarden_hosts{pool, state}`` gauge."""

    pool: str
    state: str
    count: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class DrainIdle:
    """A draining host seen idle for the first time: its pool and how long the drain took."""

    pool: str
    seconds: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseCount:
    """How many registered worker processes run one Jobwarden release (docs/upgrades.md)."""

    #: None: a process of 0.1.0 (or older), which records no release.
    release: str | None
    #: The newest migration the process's code needs (None with release None).
    schema_needs: int | None
    workers: int

    def as_json(self) -> dict[str, Any]:
        return {"release": self.release, "schema_needs": self.schema_needs,
                "workers": self.workers}
