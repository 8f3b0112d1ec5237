"""Operations on the leases table, named table-first and returning dataclasses.

Why a table and not ``pg_advisory_lock``: session-level advisory locks belong
to a connection, and behind a transaction-mode pooler (PgBouncer) consecutive
statements run on different server connections, so the lock would be held by
someone else's session or silently released. A row with an owner, an expiry on
the database clock and a fencing token survives poolers, crashes (it expires)
and lets a holder prove to anyone downstream that it is the latest one.

Every decision is one statement (see ``sql/leases.sql`` for the reasoning):
acquire-or-take-over, renew, release, clear. Waiting for a busy lease listens
for the NOTIFY its release sends, on one LISTEN connection per Database shared
by every waiter in the process (:class:`ReleaseWatcher`); NOTIFY only ever
speeds things up, callers also wake at the holder's expiry and poll.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from jobwarden import errors
from jobwarden.db.jobs import JOBS_TOPIC
from jobwarden.structs.leases import (
    MAX_NAME_LENGTH,
    Acquisition,
    HeldLease,
    LeaseRecord,
    Renewal,
    check_ttl,
    lease_name,
)

if TYPE_CHECKING:
    from jobwarden.db.database import Database, Listener, Row

logger = logging.getLogger("jobwarden.leases")

LEASES_TOPIC = "leases"

__all__ = ["LEASES_TOPIC", "MAX_NAME_LENGTH", "LeasesTable", "ReleaseWatcher"]


#: What lease_read, lease_list and the clears return first: LeaseRecord's fields, by
#: name and in its order (tests/db/test_named_rows.py checks the statements).
LEASE_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(LeaseRecord))


def _record(row: Row) -> LeaseRecord:
    return LeaseRecord(**dict(zip(LEASE_COLUMNS, row[:len(LEASE_COLUMNS)], strict=True)))


class LeasesTable:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.channel = f"{db.schema}_{LEASES_TOPIC}"
        self.jobs_channel = f"{db.schema}_{JOBS_TOPIC}"
        self._watcher: ReleaseWatcher | None = None
        self._watcher_lock = threading.Lock()

    # -- acquire -------------------------------------------------------------------

    def try_acquire(self, *, name: str, owner: str, ttl_seconds: float, host: str | None = None,
                    slots: int = 1, job_id: int | None = None,
                    claim_token: uuid.UUID | None = None) -> Acquisition:
        """Take the lease (any one of ``slots``) if free or lapsed; never blocks on a holder.

        ``job_id``/``claim_token`` also record the lease on that claimed job row.
        """
        stored = lease_name(name)
        ttl = check_ttl(ttl_seconds)
        if not owner:
            raise ValueError("a lease owner must not be empty")
        if slots < 1:
            raise ValueError("slots must be at least 1")
        params = {"name": stored, "owner": owner, "host": host, "ttl": ttl, "slots": slots,
                  "slot": 0, "job_id": job_id, "claim_token": claim_token}
        bound = self._db.bounds.lease
        if slots == 1:
            # The common case in one UPDATE (the row exists, free or lapsed); the
            # function for the rest (first use, busy, a job's lease).
            rows = self._db.call("lease_take", params, bound=bound) if job_id is None else []
            if not rows:
                rows = self._db.call("lease_acquire", params, bound=bound)
            found = rows[0] if rows else None
        else:
            if job_id is not None:
                raise ValueError("a job lease has one slot")
            found = self._db.row("lease_acquire_slot", params, bound=bound)
            # First use of this semaphore (or of a larger N): create the free rows and
            # pick again. Nothing created means every slot really is held.
            if (found is None or not found[0]) and \
                    self._db.rows("lease_seed_slots", params, bound=bound):
                found = self._db.row("lease_acquire_slot", params, bound=bound)
        if found is None:
            # Busy, but the holder's row was committed after this statement's snapshot.
            return self._busy(stored, slots)
        acquired, slot, token, expires_at, holder, holder_host, remaining = found[:7]
        return Acquisition(acquired=bool(acquired), name=stored, slot=slot,
                           token=token if acquired else None,
                           expires_at=expires_at, remaining_seconds=float(remaining or 0.0),
                           holder=holder, holder_host=holder_host)

    def _busy(self, stored: str, slots: int) -> Acquisition:
        held = [r for r in self.read(stored) if r.slot < slots and r.owner is not None]
        first = min(held, key=lambda r: r.expires_in_seconds or 0.0) if held else None
        return Acquisition(
            acquired=False, name=stored, slot=first.slot if first else 0, token=None,
            expires_at=first.expires_at if first else None,
            remaining_seconds=max(first.expires_in_seconds or 0.0, 0.0) if first else 0.0,
            holder=first.owner if first else None,
            holder_host=first.holder_host if first else None,
        )

    # -- owner-fenced changes ---------------------------------------------------------

    def renew(self, *, name: str, owner: str, ttl_seconds: float, slot: int = 0,
              token: int | None = None) -> Renewal | None:
        """Extend to ``ttl_seconds`` from now; None when it is no longer ours."""
        found = self._db.row("lease_renew", {
            "name": lease_name(name), "slot": slot, "owner": owner, "token": token,
            "ttl": check_ttl(ttl_seconds),
        }, bound=self._db.bounds.lease)
        return Renewal(expires_at=found[0], remaining_seconds=float(found[1])) if found else None

    def renew_many(self, held: Sequence[HeldLease]) -> set[tuple[str, int, int]]:
        """Renew many leases in one statement; returns (name, slot, token) still ours."""
        if not held:
            return set()
        rows = self._db.rows("lease_renew_many", {
            "names": [h.name for h in held], "slots": [h.slot for h in held],
            "owners": [h.owner for h in held], "tokens": [h.token for h in held],
            "ttls": [check_ttl(h.ttl_seconds) for h in held],
        }, bound=self._db.bounds.lease)
        return {(r[0], r[1], r[2]) for r in rows}

    def release(self, *, name: str, owner: str, slot: int = 0, token: int | None = None,
                wake_jobs: bool = True) -> bool:
        """Free the lease and wake waiters; False when it was no longer ours.

        ``wake_jobs``: also make the next job deferred on this lease due now (only
        where a job's busy acquire marked the lease; a script holding ``key:<k>`` to
        hold jobs back gets it too). That hand-over is its own statement after the
        release committed: if it fails, the release still happened (True) and the
        job waits out its defer delay.
        """
        stored = lease_name(name)
        found = self._db.call("lease_free", {"name": stored, "slot": slot, "owner": owner,
                                             "token": token, "channel": self.channel},
                              bound=self._db.bounds.lease)
        if not found:
            return False
        if wake_jobs and found[0][0]:
            try:
                self._db.call("lease_hand_over", {"name": stored,
                                                  "jobs_channel": self.jobs_channel},
                              bound=self._db.bounds.lease)
            except errors.DatabaseUnavailable as exc:
                logger.warning("lease %r released, but the next deferred job was not "
                               "woken (it runs after its defer delay): %s", stored, exc)
        return True

    def mark_waiting(self, name: str, *, seconds: float) -> None:
        """Announce a waiter until ``seconds`` from now, so releases NOTIFY (see ``watch``)."""
        self._db.execute("lease_mark_waiting", {"name": lease_name(name),
                                                "seconds": max(float(seconds), 0.0)},
                         bound=self._db.bounds.lease)

    def clear(self, name: str, *, force: bool = False,
              slot: int | None = None) -> list[LeaseRecord]:
        """Operators: free a name's held slots (only lapsed ones unless ``force``)."""
        rows = self._db.rows("lease_clear", {"name": lease_name(name), "slot": slot,
                                             "force": force, "channel": self.channel})
        return [_record(r) for r in rows]

    def clear_holder(self, name: str, *, slot: int, token: int) -> LeaseRecord | None:
        """Free one slot only if the holder with fencing token ``token`` still holds it
        (the console's confirmed clear); None when it was released or changed hands."""
        rows = self._db.rows("lease_clear_holder", {"name": lease_name(name), "slot": slot,
                                                    "token": token, "channel": self.channel})
        return _record(rows[0]) if rows else None

    # -- reads ---------------------------------------------------------------------

    def owner_of(self, name: str, *, slot: int = 0) -> str | None:
        found = self._db.row("lease_owner", {"name": lease_name(name), "slot": slot})
        return found[0] if found else None

    def read(self, name: str) -> list[LeaseRecord]:
        """Every slot row of a name, free ones included."""
        return [_record(r) for r in self._db.rows("lease_read", {"name": lease_name(name)})]

    def list(self, *, include_expired: bool = False, prefix: str | None = None,
             limit: int = 1000) -> list[LeaseRecord]:
        return [_record(r) for r in self._db.rows("lease_list", {
            "include_expired": include_expired, "prefix": prefix, "limit": limit,
        })]

    # -- waiting -------------------------------------------------------------------

    @contextlib.contextmanager
    def watch(self, name: str) -> Iterator[threading.Event]:
        """An event set whenever ``name`` is released or cleared, from now on.

        Subscribe *before* trying to acquire, then after the first busy try call
        :meth:`mark_waiting` and try once more before blocking: releases only
        NOTIFY while a waiter is marked, and this order never misses one. Without
        LISTEN (a pooler that forbids it, the database away) the event is simply
        never set and callers poll.
        """
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = ReleaseWatcher(self._db)
            watcher = self._watcher
        event = watcher.subscribe(lease_name(name))
        try:
            yield event
        finally:
            watcher.unsubscribe(lease_name(name), event)


class ReleaseWatcher:
    """One LISTEN connection per Database, fanning release NOTIFYs out to waiters.

    It runs only while someone waits (and a little longer, so back-to-back waits
    reuse it), and stops by itself when idle or when the pool was closed.
    """

    IDLE_SECONDS = 10.0

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._thread: threading.Thread | None = None

    def subscribe(self, name: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiters.setdefault(name, set()).add(event)
            if self._thread is None:
                listener = self._db.listener(LEASES_TOPIC)
                try:
                    listener.wait(0.0)  # LISTEN now, before the caller's first try
                except errors.DatabaseUnavailable as exc:
                    logger.debug("no LISTEN for lease releases (polling instead): %s", exc)
                    listener.close()
                    return event
                self._thread = threading.Thread(target=self._run, args=(listener,),
                                                name="jobwarden-lease-watch", daemon=True)
                self._thread.start()
        return event

    def unsubscribe(self, name: str, event: threading.Event) -> None:
        with self._lock:
            events = self._waiters.get(name)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[name]

    def _run(self, listener: Listener) -> None:
        idle_since: float | None = None
        try:
            while not self._db.connections.closed:
                try:
                    received = listener.wait(0.25)
                except errors.DatabaseUnavailable:
                    received = []
                    time.sleep(0.25)  # the listener reconnects on its next wait
                with self._lock:
                    for _channel, payload in received:
                        for event in self._waiters.get(payload, ()):
                            event.set()
                    if self._waiters:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > self.IDLE_SECONDS:
                        self._thread = None
                        return
        finally:
            listener.close()
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
