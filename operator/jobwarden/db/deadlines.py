"""Deadlines on database calls, and the TCP options every connection gets.

Why: a peer that keeps the TCP connection open but never answers (a hung
pooler, a stuck proxy or load balancer, a dead NAT entry, a partition) is
invisible to the server, so ``statement_timeout`` never starts, and a client
waits in ``poll()`` for ever. Every call Jobwarden makes therefore has a bound
(:class:`CallBounds`, per call type): a call that has not answered within it is
abandoned, its connection discarded, and the caller gets
:class:`~jobwarden.errors.DatabaseUnavailable`, as for a dropped connection.

How: one :class:`Watchdog` thread per process. A call arms it with its
connection and deadline (a counter increment and a dict store) and disarms it
when it returns (a dict pop); the watchdog ``shutdown(2)``s the socket of a
call still armed past its deadline. That wakes whatever waits on the socket
-- psycopg's cursors, libpq's own blocking ``PQexec`` (the flush barrier), an
asyncio connection's reader -- libpq reads end-of-file and the call fails like
a dropped connection. Why not psycopg's waits with a timeout: psycopg 3 has
none for a query (its wait ``interval`` only lets Ctrl-C through, then waits
again), libpq's blocking calls would escape it, and the asyncio client would
need its own; why not only ``tcp_user_timeout``/keepalives: a relay or pooler
that hangs still acknowledges every packet at the TCP level (its kernel does),
so only a client-side clock notices. Those TCP options are set too
(:func:`tcp_options`): they catch a path that really loses packets, also on a
connection that is idle (no call armed).

A connection whose call was abandoned is never reused: the caller sees the
failed disarm and closes it before giving it back (the pool discards a closed
connection); the watchdog shuts sockets down under a lock the caller takes
before closing, so it never touches a descriptor the caller closed and the
system reused.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

from psycopg import conninfo

from jobwarden import errors
from jobwarden.db.faults import first_line
from jobwarden.settings import env_duration

logger = logging.getLogger(__name__)

__all__ = ["CONNECT_TIMEOUT_SECONDS", "TCP_OPTIONS", "WATCHDOG", "CallBounds", "Watchdog",
           "abandoned_error", "tcp_options"]

#: How often the watchdog looks at the armed calls while any is armed: a call is
#: abandoned at most this long after its bound.
TICK_SECONDS = 0.1

#: Connecting to a host that does not answer (failover, a moved address, a peer gone
#: silent) gives up after this long unless the DSN sets ``connect_timeout`` (libpq's
#: default: none; psycopg's: 130 s, all that time one of a pool's connection attempts).
CONNECT_TIMEOUT_SECONDS = 5

#: libpq's TCP options set on every connection unless the DSN names them. Keepalive
#: probes after 15 s idle, every 5 s, 3 unanswered ones drop the connection (~30 s);
#: ``tcp_user_timeout``: data sent and not acknowledged for 30 s drops it (a path
#: that loses packets, while a call waits). Values are libpq's units (s; ms).
TCP_OPTIONS: Mapping[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}


def tcp_options(dsn: str) -> dict[str, Any]:
    """:data:`TCP_OPTIONS` the DSN does not set itself (psycopg's keyword arguments
    override the DSN's, so only the missing ones are passed)."""
    given = conninfo.conninfo_to_dict(dsn)
    # libpq ignores them on a Unix-domain socket: no need to tell the two apart here.
    return {key: value for key, value in TCP_OPTIONS.items() if key not in given}


# -- bounds ------------------------------------------------------------------------


#: Each bound, its variable and its default (seconds). docs/operations.md explains them.
_BOUNDS = {
    "call": ("JOBWARDEN_DB_CALL_TIMEOUT", 30.0),
    "claim": ("JOBWARDEN_DB_CLAIM_TIMEOUT", 15.0),
    "heartbeat": ("JOBWARDEN_DB_HEARTBEAT_TIMEOUT", 10.0),
    "record": ("JOBWARDEN_DB_RECORD_TIMEOUT", 15.0),
    "lease": ("JOBWARDEN_DB_LEASE_TIMEOUT", 10.0),
    "migrate": ("JOBWARDEN_DB_MIGRATE_TIMEOUT", 1800.0),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallBounds:
    """The longest each kind of database call may go unanswered, in seconds (0: no bound).

    ``call``: anything not named below (client enqueues and reads, the console,
    the CLI, the reaper, the schedule runner, the operator, retention, the
    worker's other periodic work). ``claim``: a worker's claim (and the question
    what a claim whose reply was lost took). ``heartbeat``: a batch heartbeat;
    it must leave time for another one inside the heartbeat grace (the worker
    checks). ``record``: writing outcomes. ``lease``: lease acquire, renew,
    release. ``migrate``: one migration run. The wait for a pooled connection
    counts towards the bound.
    """

    call: float = _BOUNDS["call"][1]
    claim: float = _BOUNDS["claim"][1]
    heartbeat: float = _BOUNDS["heartbeat"][1]
    record: float = _BOUNDS["record"][1]
    lease: float = _BOUNDS["lease"][1]
    migrate: float = _BOUNDS["migrate"][1]

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not (math.isfinite(value) and value >= 0):
                raise errors.ConfigurationError(
                    f"the {field.name} bound of database calls must be a finite number "
                    f"of seconds, 0 or more (0: no bound), not {value!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: float) -> CallBounds:
        """Each bound: ``given``, else its ``JOBWARDEN_DB_*_TIMEOUT``, else the default."""
        values = {name: env_duration(variable, default, env=env)
                  for name, (variable, default) in _BOUNDS.items()}
        values.update(given)
        return cls(**values)

    def deadline(self, bound: float) -> float:
        """The monotonic deadline of a call with ``bound`` starting now (inf: none)."""
        return time.monotonic() + bound if bound > 0 else math.inf


def abandoned_error(bound: float, cause: BaseException | None = None
                    ) -> errors.DatabaseUnavailable:
    """What a caller gets for a call the watchdog abandoned."""
    why = f" ({first_line(cause)})" if cause is not None else ""
    return errors.DatabaseUnavailable(
        f"database unavailable: no answer within {bound:g} s, call abandoned and its "
        f"connection discarded{why}")


class Watched:
    """The watchdog's half of a bounded block of calls on a connection of its own.

    Armed on entry; on exit disarmed, and :attr:`abandoned` says whether the
    watchdog shut the connection's socket down meanwhile: the caller then closes
    the connection (``conn.close()``, or ``await conn.close()`` for asyncio: the
    only difference between ``pool.bounded`` and ``AsyncDatabase.bounded``). A
    ``DatabaseUnavailable`` out of an abandoned block becomes :func:`abandoned_error`.
    """

    def __init__(self, conn: Any, bound: float) -> None:
        self.conn = conn
        self.bound = bound
        self.token = 0
        self.abandoned = False

    def __enter__(self) -> Watched:
        self.token = WATCHDOG.arm(self.conn, time.monotonic() + self.bound
                                  if self.bound > 0 else math.inf)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:
        self.abandoned = not WATCHDOG.disarm(self.token)
        if self.abandoned and isinstance(exc, errors.DatabaseUnavailable):
            raise abandoned_error(self.bound, exc) from exc


# -- the watchdog ------------------------------------------------------------------


class Watchdog:
    """Shuts down the socket of every call still armed past its deadline."""

    def __init__(self, tick: float = TICK_SECONDS) -> None:
        self._armed: dict[int, tuple[float, Any]] = {}
        self._ids = itertools.count(1)
        #: Held while a socket is shut down; a caller whose disarm failed takes it
        #: before closing its connection (see the module docstring).
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._tick = tick
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: Calls abandoned in this process (tests read it).
        self.abandoned = 0

    def arm(self, conn: Any, deadline: float) -> int:
        """Watch ``conn`` (a psycopg connection, blocking or asyncio) until ``deadline``.

        Returns the token to :meth:`disarm` with; 0 (nothing armed) for no deadline.
        """
        if deadline == math.inf:
            return 0
        token = next(self._ids)
        self._armed[token] = (deadline, conn)
        if not self._wake.is_set():  # asleep, or about to sleep: it looks again once set
            if self._thread is None:
                self._start()
            self._wake.set()
        return token

    def disarm(self, token: int) -> bool:
        """Stop watching; False when the call was abandoned (its socket shut down)."""
        if not token or self._armed.pop(token, None) is not None:
            return True
        with self._lock:  # the watchdog may be shutting the socket down right now
            pass
        return False

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="jobwarden-db-watchdog",
                                          daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            if not self._armed:
                self._wake.clear()
                if not self._armed:  # armed between the look and the clear
                    self._wake.wait()
            now = time.monotonic()
            for token, (deadline, _conn) in self._armed.copy().items():
                if deadline <= now:
                    self._abandon(token)
            time.sleep(self._tick)

    def _abandon(self, token: int) -> None:
        with self._lock:
            entry = self._armed.pop(token, None)
            if entry is None:  # disarmed meanwhile: the call returned in time
                return
            self.abandoned += 1
            _shut_down(entry[1])


#: ``struct linger`` {on, 0 s}: close resets the connection, dropping unsent data.
_NO_LINGER = struct.pack("ii", 1, 0)


def _shut_down(conn: Any) -> None:
    """End the connection's socket both ways without closing its descriptor (libpq's)."""
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed or lost already: nothing waits on it
        return
    try:
        # fromfd duplicates the descriptor: shutting the duplicate down ends the one
        # socket both refer to; closing the duplicate leaves libpq's open.
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as dup:
            # A zero linger makes the caller's close of the abandoned connection (the
            # last descriptor, right after) reset it and drop what is still queued to
            # send. A plain close delivers that once a partition heals: an abandoned
            # claim then ran on the server a minute late, its jobs held until reaped.
            dup.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
            dup.shutdown(socket.SHUT_RDWR)
    except OSError as exc:
        logger.debug("could not shut an abandoned connection down: %s", exc)


#: The process's watchdog (one thread, started by the first call with a bound).
WATCHDOG = Watchdog()
