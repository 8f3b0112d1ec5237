"""Operations on the host registry (hosts, workers, host_pools), named table-first."""

from __future__ import annotations

import dataclasses
import functools
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jobwarden import version
from jobwarden.structs.hosts import DrainIdle, HostCount, HostState, HostStatus, ReleaseCount
from jobwarden.version import VERSION

if TYPE_CHECKING:
    from jobwarden.db.database import Database


#: NOTIFY topic of freed slots on capped hosts (payload: the host name).
HOSTS_TOPIC = "hosts"


#: host_status's columns, by name: HostStatus's fields in its order (checked against
#: the statement by tests/db/test_named_rows.py).
HOST_STATUS_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HostStatus))

#: A migration file's name, as db/migrations.py reads it: its number first.
_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@functools.cache
def schema_needs() -> int:
    """The newest migration this code ships (``migrations.newest_known()``), from the
    file names alone: every worker records it at start, and importing db/migrations
    for it loads tomllib and importlib's resource readers and reads every migration's
    SQL (~0.16 MiB resident in an idle worker; docs/benchmarks.md, "Idle worker RSS")."""
    folder = Path(__file__).with_name("migrations")
    if not folder.is_dir():  # a package not on a file system (a zip import)
        from jobwarden.db import migrations

        return migrations.newest_known()
    return max((int(found.group(1)) for entry in folder.iterdir()
                if (found := _MIGRATION_FILE.match(entry.name))), default=0)


class HostsTable:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.channel = f"{db.schema}_{HOSTS_TOPIC}"

    def notify_slot_freed(self, *, host: str) -> None:
        """Wake the sibling processes of a capped host: a unit of its cap is free."""
        self._db.execute("host_slot_freed", {"channel": self.channel, "host": host})

    # -- worker processes ---------------------------------------------------------

    def register(self, *, host: str, pool: str, code_version: str, cap: int | None,
                 worker_id: uuid.UUID, pid: int, concurrency: int,
                 queues: Sequence[str]) -> None:
        """Upsert the host and insert this process's row, in one transaction."""
        with self._db.transaction() as conn:
            self._db.execute("host_upsert", {"host": host, "pool": pool,
                                             "version": code_version, "cap": cap}, conn=conn)
            self._db.execute("worker_insert", {
                "worker": worker_id, "host": host, "pid": pid, "concurrency": concurrency,
                "queues": list(queues), "version": code_version,
                "release": VERSION, "schema_needs": schema_needs(),
            }, conn=conn)

    def touch(self, *, host: str, pool: str, code_version: str) -> None:
        """A tick's refresh: the host row exists and was seen now (no process row)."""
        self._db.execute("host_touch", {"host": host, "pool": pool, "version": code_version})

    def refresh(self, *, host: str, worker_id: uuid.UUID) -> HostState | None:
        """Mark this process and its host seen; None when it must register again."""
        found = self._db.row("host_refresh", {"host": host, "worker": worker_id})
        if found is None:
            return None
        pool, cap, draining, running, idle_marked, draining_seconds = found
        return HostState(pool=pool, cap=cap, draining=draining, running=running,
                         idle_marked=idle_marked, draining_seconds=float(draining_seconds))

    def mark_idle(self, *, host: str) -> DrainIdle | None:
        """Record that a draining host became idle; only the first observer gets a result."""
        found = self._db.row("host_mark_idle", {"host": host})
        return DrainIdle(pool=found[0], seconds=float(found[1])) if found else None

    def stop_worker(self, *, host: str, worker_id: uuid.UUID, grace_seconds: float,
                    stale_seconds: float) -> bool:
        """Self-drain at SIGTERM; True when the host itself was marked draining."""
        return self._db.row("worker_stop", {
            "host": host, "worker": worker_id, "grace": grace_seconds, "stale": stale_seconds,
        }) is not None

    def deregister(self, *, host: str, worker_id: uuid.UUID) -> bool:
        """Remove this process; True when the host row went with it."""
        with self._db.transaction() as conn:
            self._db.execute("worker_delete", {"worker": worker_id}, conn=conn)
            return self._db.row("host_delete_if_unused", {"host": host}, conn=conn) is not None

    def prune(self, *, stale_seconds: float) -> tuple[int, int]:
        """Forget processes and hosts not seen for ``stale_seconds``: (processes, hosts)."""
        params = {"stale": stale_seconds}
        # One transaction (one message): every process prunes, so each costs the
        # database a transaction per prune interval, not two (issue 31).
        workers, hosts = self._db.in_one_round_trip([("worker_prune", params),
                                                     ("host_prune", params)])
        return len(workers), len(hosts)

    # -- drain, resume, caps --------------------------------------------------------

    def drain(self, *, host: str | None = None, pool: str | None = None, reason: str,
              expires_in: float) -> list[str]:
        """Drain a host or a pool; returns the registered host names now draining."""
        with self._db.transaction() as conn:
            if pool is not None and host is None:
                self._db.execute("pool_drain", {"pool": pool, "reason": reason,
                                                "expires": expires_in}, conn=conn)
            rows = self._db.rows("host_drain", {"host": host, "pool": pool, "reason": reason,
                                                "expires": expires_in}, conn=conn)
        return sorted(r[0] for r in rows)

    def resume(self, *, host: str | None = None, pool: str | None = None) -> list[str]:
        with self._db.transaction() as conn:
            if pool is not None and host is None:
                self._db.execute("pool_resume", {"pool": pool}, conn=conn)
            rows = self._db.rows("host_resume", {"host": host, "pool": pool}, conn=conn)
        return sorted(r[0] for r in rows)

    def set_pool_cap(self, *, pool: str, cap: int | None) -> None:
        self._db.execute("pool_set_cap", {"pool": pool, "cap": cap})

    # -- reading --------------------------------------------------------------------

    def status(self, *, host: str | None = None, pool: str | None = None) -> list[HostStatus]:
        return [HostStatus(**dict(zip(HOST_STATUS_COLUMNS, row, strict=True)))
                for row in self._db.rows("host_status", {"host": host, "pool": pool})]

    def releases(self) -> list[ReleaseCount]:
        """Registered worker processes per release, oldest first (unrecorded first)."""
        found = [ReleaseCount(release=r[0], schema_needs=r[1], workers=int(r[2]))
                 for r in self._db.rows("worker_releases", {})]
        return sorted(found, key=lambda c: (c.release is not None,
                                            version.parse(c.release or "0.0.0"),
                                            c.schema_needs or 0))

    def names(self, *, host: str | None = None, pool: str | None = None) -> list[str]:
        return [r[0] for r in self._db.rows("host_names", {"host": host, "pool": pool})]

    def running(self, hosts: Sequence[str]) -> dict[str, int]:
        """Processing jobs per host name (registered or not)."""
        if not hosts:
            return {}
        return {name: int(n) for name, n in self._db.rows("host_running",
                                                          {"hosts": list(hosts)})}

    def counts(self) -> list[HostCount]:
        """Hosts per pool and state (active, draining): the jobwarden_hosts gauge."""
        return [HostCount(pool=p, state=s, count=n) for p, s, n in self._db.rows("host_counts")]

    # -- the tick route's overlap guard -------------------------------------------------

    def tick_acquire(self, *, host: str, owner: uuid.UUID, ttl_seconds: float) -> bool:
        return self._db.row("host_tick_acquire", {"host": host, "owner": owner,
                                                  "ttl": ttl_seconds}) is not None

    def tick_release(self, *, host: str, owner: uuid.UUID) -> None:
        self._db.execute("host_tick_release", {"host": host, "owner": owner})
