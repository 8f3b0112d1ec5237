"""Cluster-wide leases for any code: a context manager and a decorator.

::

    with client.lease("nightly-report", ttl=600) as lease:      # LeaseBusy if held
        build_report(fencing_token=lease.token)

    with client.lease("nightly-report", ttl=600, on_busy="skip") as lease:
        if lease is None:                                        # someone else has it
            return

    lease = client.lease("nightly-report", ttl=600, wait=5).try_acquire()  # Lease | None

    @client.lease("reconcile", key="account_id", ttl=600, wait=30)
    def reconcile(account_id: str) -> None: ...                # lease reconcile:<id>

Why a lease and not a lock: a holder can die, stall (GC, SIGSTOP, a network
partition) or be slower than it promised. Its lease then lapses on the database
clock and the next caller takes it over; the old holder finds out at its next
``renew()`` or at release (``lease_lost``), and anything it writes downstream can
be refused by comparing ``lease.token`` (a fencing token that strictly increases
per name) with the newest one seen. ``held`` is a conservative local estimate
(it ends before the database's expiry), never a guarantee by itself.

``wait`` blocks on the NOTIFY a release sends and on the holder's expiry, never
in a tight poll. Telemetry: :func:`subscribe` (process-wide) or ``on_event=``
per call receive :class:`LeaseEvent` (``lease_acquired``, ``lease_busy``,
``lease_lost``); metrics ``jobwarden_leases_held``, ``jobwarden_lease_busy_total``
and ``jobwarden_lease_lost_total`` with ``kind="lock"`` are kept here too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, cast, overload

from jobwarden import errors, settings, textrules
from jobwarden.observability import metrics
from jobwarden.structs.leases import Acquisition, HeldLease, check_ttl
from jobwarden.structs.policies import LockOnBusy

if TYPE_CHECKING:
    from jobwarden.db.database import Database
    from jobwarden.worker.context import Attempt

logger = logging.getLogger("jobwarden.leases")

LeaseKind = Literal["job", "key", "schedule", "lock"]
EventName = Literal["lease_acquired", "lease_busy", "lease_lost"]

#: Longest single sleep of a waiter: release NOTIFYs and the holder's expiry wake
#: it sooner; this only bounds the delay when NOTIFY is unavailable (a pooler).
POLL_CAP_SECONDS = 1.0
#: How long ``Lease.release`` keeps retrying a release the database did not
#: answer before it says so (raises :class:`LeaseNotReleased`).
RELEASE_RETRY_SECONDS = 30.0


class LeaseBusy(errors.JobwardenError):
    """Another owner holds the lease (still, after ``wait``)."""

    def __init__(self, name: str, *, holder: str | None, holder_host: str | None,
                 retry_after: float) -> None:
        where = f" on {holder_host}" if holder_host else ""
        super().__init__(f"lease {name!r} is held by {holder or 'another owner'}{where}; "
                         f"it may free up in {retry_after:.1f}s")
        self.name = name
        self.holder = holder
        self.holder_host = holder_host
        self.retry_after = retry_after


class LeaseLost(errors.JobwardenError):
    """The lease lapsed and another owner took it over (raised by ``Lease.renew``)."""

    def __init__(self, name: str, token: int) -> None:
        super().__init__(f"lease {name!r} (token {token}) was taken over by another owner")
        self.name = name
        self.token = token


class LeaseNotReleased(errors.DatabaseUnavailable):
    """``Lease.release`` could not reach the database: the lease is still held there.

    It lapses at its ttl unless a later ``release()`` (which retries) gets through.
    """

    def __init__(self, name: str, token: int, reason: str) -> None:
        super().__init__(f"lease {name!r} (token {token}) was not released: {reason}")
        self.name = name
        self.token = token


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeaseEvent:
    """What telemetry callbacks receive. ``holder``/``retry_after`` only for busy."""

    event: EventName
    name: str
    kind: LeaseKind
    owner: str | None = None
    token: int | None = None
    holder: str | None = None
    holder_host: str | None = None
    retry_after: float | None = None
    on_busy: str | None = None


EventCallback = Callable[[LeaseEvent], object]
_subscribers: list[EventCallback] = []
_subscribers_lock = threading.Lock()


def subscribe(callback: EventCallback) -> Callable[[], None]:
    """Receive every lease event of this process; returns the unsubscribe function."""
    with _subscribers_lock:
        _subscribers.append(callback)

    def unsubscribe() -> None:
        with _subscribers_lock:
            if callback in _subscribers:
                _subscribers.remove(callback)

    return unsubscribe


def emit(event: LeaseEvent, extra: EventCallback | None = None) -> None:
    """Deliver an event; a raising callback is logged and never breaks the caller."""
    with _subscribers_lock:
        callbacks = list(_subscribers)
    if extra is not None:
        callbacks.append(extra)
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            logger.exception("lease telemetry callback %r failed", callback)


# -- acquiring ------------------------------------------------------------------------


def acquire(db: Database, *, name: str, owner: str, ttl: float, wait: float = 0.0,
            host: str | None = None, slots: int = 1) -> tuple[Acquisition, float]:
    """Try once, or keep trying for up to ``wait`` seconds, woken by releases and expiry.

    Returns the last answer and when (monotonic) its request was sent: a holder's
    local deadline counts from then, so it never outlasts the database's expiry.
    """
    if wait <= 0:
        sent = time.monotonic()
        return db.leases.try_acquire(name=name, owner=owner, ttl_seconds=ttl, host=host,
                                     slots=slots), sent
    deadline = time.monotonic() + wait
    marked = False
    with db.leases.watch(name) as released:  # subscribed before the first try
        while True:
            released.clear()
            sent = time.monotonic()
            found = db.leases.try_acquire(name=name, owner=owner, ttl_seconds=ttl, host=host,
                                          slots=slots)
            left = deadline - time.monotonic()
            if found.acquired or left <= 0:
                return found, sent
            if not marked:
                # Releases NOTIFY only while someone is marked as waiting; the next
                # try (right away) covers a release that came before the mark.
                db.leases.mark_waiting(name, seconds=left)
                marked = True
                continue
            # retry_after 0 means "lapsed just now" or a concurrent insert: retry soon.
            released.wait(min(left, max(found.retry_after, 0.005), POLL_CAP_SECONDS))


class LeaseHolder:
    """One held lease's bookkeeping: renew, release, lost -- the same for every holder.

    The standalone :class:`Lease`, an exclusive job's :class:`JobLease` and a
    periodic duty's lease (``maintenance/looping.py``) all hold a lease row the
    same way, so they share this class: a conservative local deadline (counted
    from before the request that set it, so it ends no later than the database's
    expiry), owner- and token-fenced renewal, an honest release (released only
    once the database confirmed it; retried, then :class:`LeaseNotReleased`), and
    one place that turns "another owner took it over" into ``lost`` and the
    ``leases_held`` / ``lease_lost`` metrics (``counted=False`` keeps a lease out of
    the metrics: the operator's loop leases are not job or lock leases).
    """

    def __init__(self, db: Database, acquisition: Acquisition, *, owner: str, ttl: float,
                 kind: LeaseKind, requested_at: float, counted: bool = True) -> None:
        assert acquisition.acquired and acquisition.token is not None
        self._db = db
        self.name = acquisition.name
        self.slot = acquisition.slot
        self.token: int = acquisition.token
        self.owner = owner
        self.ttl = ttl
        self.kind: LeaseKind = kind
        self.counted = counted
        #: The database's expiry (renew moves it).
        self.expires_at: datetime.datetime | None = acquisition.expires_at
        # Counted from before the request was sent, so it ends no later than the
        # database's expiry whatever the round-trip time.
        self._deadline = requested_at + acquisition.remaining_seconds
        #: When (monotonic) the last request that extended the lease was sent.
        self.renewed_at = requested_at
        self._lock = threading.Lock()
        self._release_lock = threading.Lock()
        self.released = False
        self.lost = False
        if counted:
            metrics.LEASES_HELD.labels(kind).inc()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<{type(self).__name__} {self.name!r} slot={self.slot} token={self.token} {state}>"

    @property
    def held(self) -> bool:
        """Not released, not known lost, and (locally, conservatively) not expired."""
        return not self.released and not self.lost and time.monotonic() < self._deadline

    @property
    def remaining(self) -> float:
        """Seconds left, by the conservative local estimate (0 once released or lost)."""
        if self.released or self.lost:
            return 0.0
        return max(self._deadline - time.monotonic(), 0.0)

    def as_held(self) -> HeldLease:
        """What a batch renewal (``db.leases.renew_many``) needs to know about it."""
        return HeldLease(name=self.name, slot=self.slot, owner=self.owner, token=self.token,
                         ttl_seconds=self.ttl)

    def extend(self, ttl: float | None = None) -> bool:
        """Renew to ``ttl`` (default: the current ttl) from now; False once lost.

        A renewal that finds the row no longer ours marks the lease lost (see
        :meth:`mark_lost`); a database error propagates and changes nothing.
        """
        new_ttl = self.ttl if ttl is None else ttl
        sent = time.monotonic()
        renewal = self._db.leases.renew(name=self.name, slot=self.slot, owner=self.owner,
                                        token=self.token, ttl_seconds=new_ttl)
        if renewal is None:
            self.mark_lost()
            return False
        self.ttl = new_ttl
        self._deadline = sent + renewal.remaining_seconds
        self.renewed_at = sent
        self.expires_at = renewal.expires_at
        return True

    def extended(self, sent: float) -> None:
        """A batch renewal sent at ``sent`` kept this lease: it lasts a ttl from then."""
        self._deadline = max(self._deadline, sent + self.ttl)
        self.renewed_at = sent

    def release(self, *, retry_seconds: float | None = None) -> bool:
        """Free the lease; False (and ``lost``) if another owner had taken it over.

        Honest about the database: the lease counts as released only once a
        release statement was seen to commit. A failed call (database away, reply
        lost) is retried for up to ``retry_seconds`` (default
        :data:`RELEASE_RETRY_SECONDS`); if it still fails, :class:`LeaseNotReleased`
        is raised, the lease stays ours in the database until its ttl, and calling
        ``release()`` again tries again. A retry that finds the row no longer ours
        after a call whose outcome was unknown means that call did commit, as long
        as it was sent before the lease could lapse (no one can take over a lease
        before it lapses); otherwise the lease is reported lost.
        """
        budget = RELEASE_RETRY_SECONDS if retry_seconds is None else retry_seconds
        with self._release_lock:  # one release in flight: retries never race each other
            if self.released or self.lost:
                return not self.lost
            give_up_at = time.monotonic() + budget
            first_sent: float | None = None
            delay = 0.05
            while True:
                sent = time.monotonic()
                try:
                    ok = self._db.leases.release(name=self.name, slot=self.slot,
                                                 owner=self.owner, token=self.token)
                except errors.DatabaseUnavailable as exc:
                    first_sent = sent if first_sent is None else first_sent
                    if time.monotonic() + delay >= give_up_at:
                        logger.warning("lease %r (token %d) not released: %s", self.name,
                                       self.token, exc)
                        raise LeaseNotReleased(self.name, self.token, str(exc)) from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if not ok and first_sent is not None and first_sent < self._deadline:
                    ok = True  # an earlier, unanswered call committed (see docstring)
                break
            if ok:
                with self._lock:
                    self.released = True
                if self.counted:
                    metrics.LEASES_HELD.labels(self.kind).dec()
            else:
                self.mark_lost()
            return ok

    def abandon(self) -> None:
        """Stop holding it here without a release: the row lapses at its ttl.

        For a holder that cannot wait for the database (a job slot after a failed
        release): the lease no longer counts as held by this process.
        """
        with self._lock:
            if self.released or self.lost:
                return
            self.released = True
        if self.counted:
            metrics.LEASES_HELD.labels(self.kind).dec()

    def mark_lost(self) -> bool:
        """Another owner took it over: count it once; True for the call that marked it."""
        with self._lock:
            if self.lost or self.released:
                return False
            self.lost = True
        if self.counted:
            metrics.LEASES_HELD.labels(self.kind).dec()
            metrics.LEASE_LOST.labels(self.kind).inc()
        self._on_lost()
        return True

    def _on_lost(self) -> None:
        """What a subclass adds when the lease is first marked lost (telemetry, a log line)."""


class Lease(LeaseHolder):
    """A held lease of the standalone API. Use it as a context manager (or :meth:`release`)."""

    def __init__(self, db: Database, acquisition: Acquisition, *, owner: str, ttl: float,
                 kind: LeaseKind, requested_at: float, on_event: EventCallback | None) -> None:
        super().__init__(db, acquisition, owner=owner, ttl=ttl, kind=kind,
                         requested_at=requested_at)
        self._on_event = on_event
        if _subscribers or on_event is not None:  # no event built when nobody listens
            emit(LeaseEvent(event="lease_acquired", name=self.name, kind=kind, owner=owner,
                            token=self.token), on_event)

    def renew(self, ttl: float | None = None) -> None:
        """Extend to ``ttl`` (default: the original ttl) from now; raises LeaseLost."""
        new_ttl = check_ttl(ttl) if ttl is not None else self.ttl
        if self.lost:
            raise LeaseLost(self.name, self.token)
        if self.released:
            raise errors.JobwardenError(f"lease {self.name!r} was already released")
        if not self.extend(new_ttl):
            raise LeaseLost(self.name, self.token)

    def _on_lost(self) -> None:
        logger.warning("lease %r (token %d) was taken over by another owner before its "
                       "holder finished", self.name, self.token)
        emit(LeaseEvent(event="lease_lost", name=self.name, kind=self.kind, owner=self.owner,
                        token=self.token), self._on_event)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- key resolvers -----------------------------------------------------------------------


class JobLease(LeaseHolder):
    """An attempt's lease: the shared holder, and the job it is held for (for the logs).

    Held by an exclusive job's attempt (:mod:`jobwarden.extensions.exclusive`) and by
    the pod-run claim (:mod:`jobwarden.podruns.leasing`). A worker imports this
    module with the first attempt that takes a lease, not at start-up
    (docs/benchmarks.md, "Idle worker RSS").
    """

    def __init__(self, db: Database, acquisition: Acquisition, *, attempt: Attempt,
                 owner: str, window: float, kind: LeaseKind, requested_at: float) -> None:
        super().__init__(db, acquisition, owner=owner, ttl=window, kind=kind,
                         requested_at=requested_at)
        self.attempt = attempt
        #: Where it was found lost (renewal or release), for the warning.
        self.lost_at = "renewal"

    def _on_lost(self) -> None:
        claim = self.attempt.claim
        logger.warning("job %d (%s) attempt %d lost lease %r (token %d) at %s: another owner "
                       "took it over while the job was running", claim.id, claim.job_class,
                       claim.attempt, self.name, self.token, self.lost_at)


@dataclasses.dataclass(frozen=True)
class LiteralKey:
    value: str


def literal(value: str) -> LiteralKey:
    """A key used as written (a plain string names an argument or attribute)."""
    return LiteralKey(value)


KeyResolver = str | LiteralKey | Callable[..., object]


def resolve_key(key: KeyResolver, function: Callable[..., Any], args: tuple[Any, ...],
                kwargs: Mapping[str, Any]) -> str | None:
    """The key segment for one call; None when blank (then nothing is locked).

    - ``literal("x")``: ``"x"``.
    - ``"account_id"``: the function's argument of that name if it has one, else
      that attribute (or mapping item) of the first argument.
    - a callable: called with the function's own arguments.
    """
    value: object
    if isinstance(key, LiteralKey):
        value = key.value
    elif isinstance(key, str):
        signature = inspect.signature(function)
        if key in signature.parameters:
            bound = signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            value = bound.arguments.get(key)
        else:
            if args:
                first = args[0]
            elif kwargs:
                first = next(iter(kwargs.values()))
            else:
                raise TypeError(f"lease key {key!r}: the call has no argument to read it from")
            value = first[key] if isinstance(first, Mapping) else getattr(first, key)
    else:
        value = key(*args, **kwargs)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


# -- the guard: context manager, decorator, explicit acquire --------------------------

T = TypeVar("T")  # Lease, or Lease | None with on_busy="skip"
F = TypeVar("F", bound=Callable[..., Any])


class HasDatabase(Protocol):
    @property
    def db(self) -> Database: ...


class LeaseGuard(Generic[T]):
    """What ``client.lease(...)`` returns: not yet acquired; enter, decorate or acquire it."""

    def __init__(self, db: Database, name: str, *, ttl: float, wait: float, on_busy: LockOnBusy,
                 owner: str | None, slots: int, key: KeyResolver | None, kind: LeaseKind,
                 host: str | None, on_event: EventCallback | None) -> None:
        if on_busy not in ("fail", "skip"):
            raise ValueError(f"on_busy must be 'fail' or 'skip', not {on_busy!r}")
        if slots < 1:
            raise ValueError("slots must be at least 1")
        if wait < 0:
            raise ValueError("wait must not be negative")
        # One rule with the database's: not blank ("   " was accepted while "" was
        # not), no NUL or lone surrogate. Any length: a name over 200 characters is
        # stored hashed (structs.leases.lease_name, docs/leases.md "Long names").
        textrules.check_name(name, "a lease name", max_length=sys.maxsize)
        self._db = db
        self.name = name
        self.ttl = check_ttl(ttl)
        self.wait = float(wait)
        self.on_busy: LockOnBusy = on_busy
        self.owner = owner
        self.slots = slots
        self.key = key
        self.kind: LeaseKind = kind
        self.host = host or settings.process_host_name()
        self.on_event = on_event
        #: What each thread's open ``with`` blocks on this guard hold (a guard may be
        #: entered by several threads at once, and nested): thread id -> stack.
        self._entered: dict[int, list[Lease | None]] = {}

    # explicit

    def _attempt(self, name: str) -> Lease | Acquisition:
        owner = self.owner or os.urandom(16).hex()  # a UUID4's randomness, as hex
        found, sent = acquire(self._db, name=name, owner=owner, ttl=self.ttl, wait=self.wait,
                              host=self.host, slots=self.slots)
        if found.acquired:
            return Lease(self._db, found, owner=owner, ttl=self.ttl, kind=self.kind,
                         requested_at=sent, on_event=self.on_event)
        metrics.LEASE_BUSY.labels(self.kind).inc()
        emit(LeaseEvent(event="lease_busy", name=found.name, kind=self.kind, owner=owner,
                        holder=found.holder, holder_host=found.holder_host,
                        retry_after=found.retry_after, on_busy=self.on_busy), self.on_event)
        return found

    def try_acquire(self, name: str | None = None) -> Lease | None:
        """The held lease, or None when busy (after ``wait``)."""
        got = self._attempt(name or self.name)
        return got if isinstance(got, Lease) else None

    def acquire(self, name: str | None = None) -> Lease:
        """The held lease; raises LeaseBusy when busy (after ``wait``), whatever ``on_busy``."""
        got = self._attempt(name or self.name)
        if isinstance(got, Lease):
            return got
        raise LeaseBusy(got.name, holder=got.holder, holder_host=got.holder_host,
                        retry_after=got.retry_after)

    def _take(self, name: str) -> Lease | None:
        return self.acquire(name) if self.on_busy == "fail" else self.try_acquire(name)

    # context manager

    def __enter__(self) -> T:
        if self.key is not None:
            raise TypeError("a lease with a key resolver is a decorator; "
                            "put the key into the name to use it in a with statement")
        lease = self._take(self.name)
        self._entered.setdefault(threading.get_ident(), []).append(lease)
        return cast(T, lease)

    def __exit__(self, *exc: object) -> None:
        thread = threading.get_ident()
        stack = self._entered[thread]
        lease = stack.pop()
        if not stack:
            del self._entered[thread]
        if lease is not None:
            lease.release()

    # decorator

    def __call__(self, function: F) -> F:
        """Run ``function`` under the lease (``name:key`` with a key); skip -> returns None."""

        def lease_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, str]:
            if self.key is None:
                return True, self.name
            segment = resolve_key(self.key, function, args, kwargs)
            return segment is not None, f"{self.name}:{segment}"

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                locking, name = lease_for(args, kwargs)
                if not locking:
                    return await function(*args, **kwargs)
                lease = await asyncio.to_thread(self._take, name)
                if lease is None:
                    return None
                try:
                    return await function(*args, **kwargs)
                finally:
                    await asyncio.to_thread(lease.release)

            return cast(F, run_async)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            locking, name = lease_for(args, kwargs)
            if not locking:
                return function(*args, **kwargs)
            lease = self._take(name)
            if lease is None:
                return None
            with lease:
                return function(*args, **kwargs)

        return cast(F, run)


@overload
def lease(client: HasDatabase, name: str, *, ttl: float, wait: float = ...,
          on_busy: Literal["fail"] = ..., owner: str | None = ..., slots: int = ...,
          key: KeyResolver | None = ..., kind: LeaseKind = ..., host: str | None = ...,
          on_event: EventCallback | None = ...) -> LeaseGuard[Lease]: ...
@overload
def lease(client: HasDatabase, name: str, *, ttl: float, wait: float = ...,
          on_busy: Literal["skip"], owner: str | None = ..., slots: int = ...,
          key: KeyResolver | None = ..., kind: LeaseKind = ..., host: str | None = ...,
          on_event: EventCallback | None = ...) -> LeaseGuard[Lease | None]: ...


def lease(client: HasDatabase, name: str, *, ttl: float, wait: float = 0.0,
          on_busy: LockOnBusy = "fail", owner: str | None = None, slots: int = 1,
          key: KeyResolver | None = None, kind: LeaseKind = "lock", host: str | None = None,
          on_event: EventCallback | None = None) -> LeaseGuard[Any]:
    """A cluster-wide lease named ``name`` (``Client.lease`` is this function).

    ``ttl``: seconds it survives without renewal (crash insurance: size it for the
    worst-case hold time, or call ``renew()``). ``wait``: seconds to keep trying
    while busy. ``on_busy``: ``"fail"`` raises :class:`LeaseBusy`, ``"skip"``
    yields None (context manager) or returns None without calling (decorator).
    ``owner``: defaults to a fresh id per acquisition. ``slots=N``: a semaphore,
    at most N holders. ``key``: decorator only, makes the name ``name:<key>``.
    """
    return LeaseGuard(client.db, name, ttl=ttl, wait=wait, on_busy=on_busy, owner=owner,
                      slots=slots, key=key, kind=kind, host=host, on_event=on_event)
