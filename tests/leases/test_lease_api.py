"""The standalone lease API: context manager, decorator, wait, telemetry, metrics."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

import jobwarden
from jobwarden.coordination import leases
from jobwarden.observability import metrics
from jobwarden.structs.leases import MAX_NAME_LENGTH, lease_name
from tests.support.waiting import wait_for


def _value(metric: Any, *labels: str) -> float:
    return float(metric.labels(*labels).get())


def test_the_context_manager_yields_a_held_lease_and_releases_it(
        client: jobwarden.Client) -> None:
    held_before = _value(metrics.LEASES_HELD, "lock")
    with client.lease("report", ttl=30) as lease:
        assert lease.held and lease.token > 0 and lease.expires_at is not None
        assert 29 < lease.remaining <= 30
        assert client.db.leases.owner_of("report") == lease.owner
        assert _value(metrics.LEASES_HELD, "lock") == held_before + 1
    assert not lease.held
    assert client.db.leases.owner_of("report") is None
    assert _value(metrics.LEASES_HELD, "lock") == held_before


def test_a_busy_lease_raises_lease_busy_with_the_holder(client: jobwarden.Client) -> None:
    busy_before = _value(metrics.LEASE_BUSY, "lock")
    with client.lease("report", ttl=30, owner="the-holder"), \
            pytest.raises(jobwarden.LeaseBusy) as caught, client.lease("report", ttl=30):
        pytest.fail("entered a held lease")
    assert caught.value.holder == "the-holder"
    assert 0 < caught.value.retry_after <= 30
    assert caught.value.name == "report"
    assert _value(metrics.LEASE_BUSY, "lock") == busy_before + 1


def test_skip_yields_none_and_try_acquire_returns_none(client: jobwarden.Client) -> None:
    with client.lease("report", ttl=30):
        with client.lease("report", ttl=30, on_busy="skip") as skipped:
            assert skipped is None
        assert client.lease("report", ttl=30).try_acquire() is None
    lease = client.lease("report", ttl=30).try_acquire()
    assert lease is not None
    with lease:
        assert lease.held
    assert client.db.leases.owner_of("report") is None


def test_renewal_extends_and_a_taken_over_lease_reports_lost(client: jobwarden.Client) -> None:
    events: list[leases.LeaseEvent] = []
    lost_before = _value(metrics.LEASE_LOST, "lock")
    lease = client.lease("renew-me", ttl=0.3, on_event=events.append).acquire()
    lease.renew(ttl=60)
    assert lease.remaining > 50
    lease.renew(ttl=0.1)
    wait_for(lambda: client.db.leases.owner_of("renew-me") is None, message="lapsed")
    thief = client.lease("renew-me", ttl=30).acquire()
    assert thief.token > lease.token

    with pytest.raises(jobwarden.LeaseLost):
        lease.renew()
    assert lease.lost and not lease.held
    assert not lease.release()
    assert client.db.leases.owner_of("renew-me") == thief.owner
    assert [e.event for e in events] == ["lease_acquired", "lease_lost"]
    assert _value(metrics.LEASE_LOST, "lock") == lost_before + 1


def test_release_of_a_taken_over_lease_is_lost_not_an_error(client: jobwarden.Client) -> None:
    with client.lease("short", ttl=0.1) as lease:
        wait_for(lambda: client.db.leases.owner_of("short") is None, message="lapsed")
        client.lease("short", ttl=30).acquire()
    assert lease.lost


def test_telemetry_subscribers_see_acquired_busy_and_lost(client: jobwarden.Client) -> None:
    seen: list[tuple[str, str]] = []
    unsubscribe = leases.subscribe(lambda e: seen.append((e.event, e.name)))
    try:
        with client.lease("t", ttl=0.2):
            with client.lease("t", ttl=1, on_busy="skip"):
                pass
            wait_for(lambda: client.db.leases.owner_of("t") is None, message="lapsed")
            client.lease("t", ttl=30).acquire()
    finally:
        unsubscribe()
    assert seen == [("lease_acquired", "t"), ("lease_busy", "t"), ("lease_acquired", "t"),
                    ("lease_lost", "t")]


def test_a_raising_telemetry_callback_never_breaks_the_lease(client: jobwarden.Client) -> None:
    def broken(event: leases.LeaseEvent) -> None:
        raise RuntimeError("telemetry down")

    with client.lease("robust", ttl=30, on_event=broken) as lease:
        assert lease.held


#: A waiter's longest sleep in these tests: far beyond any bound asserted below, so
#: a waiter that woke in time was woken by the release's NOTIFY (or the holder's
#: expiry), never by its poll. The speed of the hand-over is measured in bench/.
NO_POLL_SECONDS = 120.0


def _handoff_lag(client: jobwarden.Client) -> float:
    """Seconds from the holder's release() call to a blocked waiter holding the lease."""
    holder = client.lease("handoff", ttl=600).acquire()
    got: dict[str, float] = {}

    def waiter() -> None:
        with client.lease("handoff", ttl=30, wait=60):
            got["at"] = time.monotonic()

    def last_token() -> int:
        with client.db.connection() as conn:
            row = conn.execute("SELECT last_value FROM jobwarden.lease_tokens").fetchone()
        return int(row[0]) if row else 0

    thread = threading.Thread(target=waiter)
    thread.start()
    # Every try draws a token (see lease_acquire): two tries (the busy one, then the
    # one right after marking itself as waiting) show it is subscribed and waiting.
    wait_for(lambda: last_token() >= holder.token + 2, message="the waiter's tries")
    released_at = time.monotonic()
    holder.release()
    thread.join(timeout=60)
    assert "at" in got, "the waiter never got the lease"
    return got["at"] - released_at


def test_a_waiter_is_woken_by_the_release_not_by_its_poll(
        client: jobwarden.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither a poll (NO_POLL_SECONDS) nor the holder's expiry (600 s) nor the
    # wait's end (60 s) can come within 30 s: only the NOTIFY can.
    monkeypatch.setattr(leases, "POLL_CAP_SECONDS", NO_POLL_SECONDS)
    lags = [_handoff_lag(client) for _ in range(3)]
    assert max(lags) < 30.0, f"wake-up lags {lags}"


def test_wait_also_wakes_at_the_holders_expiry(client: jobwarden.Client,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases, "POLL_CAP_SECONDS", NO_POLL_SECONDS)
    client.lease("crashed-holder", ttl=0.4).acquire()  # never released, as if its process died
    started = time.monotonic()
    with client.lease("crashed-holder", ttl=30, wait=60) as lease:
        waited = time.monotonic() - started
    assert lease.token > 0
    assert 0.3 < waited < 30.0  # the expiry, not a poll interval or the full wait


def test_wait_gives_up_after_the_wait(client: jobwarden.Client) -> None:
    client.lease("held", ttl=30).acquire()
    started = time.monotonic()
    with pytest.raises(jobwarden.LeaseBusy):
        client.lease("held", ttl=30, wait=0.3).acquire()
    assert 0.3 <= time.monotonic() - started < 10.0  # the wait, not the holder's 30 s


def test_a_semaphore_lease_admits_n_holders(client: jobwarden.Client) -> None:
    first = client.lease("slots", ttl=30, slots=2).acquire()
    second = client.lease("slots", ttl=30, slots=2).acquire()
    assert {first.slot, second.slot} == {0, 1}
    assert client.lease("slots", ttl=30, slots=2).try_acquire() is None
    second.release()
    third = client.lease("slots", ttl=30, slots=2).acquire()
    assert third.slot == second.slot and third.token > second.token


@dataclasses.dataclass
class Account:
    account_id: str


def test_the_decorator_locks_per_resolved_key(client: jobwarden.Client) -> None:
    seen: list[str | None] = []

    @client.lease("reconcile", key="account_id", ttl=30)
    def by_parameter(account_id: str) -> str:
        seen.append(client.db.leases.owner_of(f"reconcile:{account_id}"))
        return account_id

    @client.lease("reconcile", key="account_id", ttl=30)
    def by_attribute(account: Account) -> None:
        seen.append(client.db.leases.owner_of(f"reconcile:{account.account_id}"))

    @client.lease("reconcile", key="account_id", ttl=30)
    def by_item(payload: dict[str, str]) -> None:
        seen.append(client.db.leases.owner_of(f"reconcile:{payload['account_id']}"))

    @client.lease("reconcile", key=lambda tenant, n: f"{tenant}-{n}", ttl=30)
    def by_callable(tenant: str, n: int) -> None:
        seen.append(client.db.leases.owner_of(f"reconcile:{tenant}-{n}"))

    @client.lease("reconcile", key=jobwarden.literal("everyone"), ttl=30)
    def by_literal() -> None:
        seen.append(client.db.leases.owner_of("reconcile:everyone"))

    assert by_parameter("acct-1") == "acct-1"
    by_attribute(Account("acct-2"))
    by_item({"account_id": "acct-3"})
    by_callable("t", 4)
    by_literal()
    assert len(seen) == 5 and all(owner is not None for owner in seen)
    assert client.db.leases.list() == []  # all released


def test_the_decorator_with_skip_does_not_call_the_function_when_busy(
        client: jobwarden.Client) -> None:
    calls: list[str] = []

    @client.lease("reconcile", key="account_id", ttl=30, on_busy="skip")
    def reconcile(account_id: str) -> str:
        calls.append(account_id)
        return "done"

    with client.lease("reconcile:acct-1", ttl=30):
        assert reconcile("acct-1") is None
        assert reconcile("acct-2") == "done"  # a different key is free
    assert reconcile("acct-1") == "done"
    assert calls == ["acct-2", "acct-1"]


def test_a_blank_key_means_no_locking(client: jobwarden.Client) -> None:
    @client.lease("reconcile", key="account_id", ttl=30)
    def reconcile(account_id: str | None) -> str:
        return "ran"

    with client.lease("reconcile:None", ttl=30), client.lease("reconcile:", ttl=30):
        assert reconcile(None) == "ran"
        assert reconcile("  ") == "ran"
    assert client.db.leases.read("reconcile") == []


def test_the_decorator_with_fail_raises_lease_busy(client: jobwarden.Client) -> None:
    @client.lease("nightly", ttl=30)
    def nightly() -> str:
        return "ran"

    with client.lease("nightly", ttl=30), pytest.raises(jobwarden.LeaseBusy):
        nightly()
    assert nightly() == "ran"


async def _async_body() -> str:
    return "async ran"


def test_the_decorator_wraps_async_functions(client: jobwarden.Client) -> None:
    import asyncio

    @client.lease("async-job", ttl=30)
    async def run() -> str:
        assert client.db.leases.owner_of("async-job") is not None
        return await _async_body()

    assert asyncio.run(run()) == "async ran"
    assert client.db.leases.owner_of("async-job") is None


def test_bad_arguments_are_refused_before_anything_is_stored(client: jobwarden.Client) -> None:
    for bad in ({"ttl": 0}, {"ttl": float("nan")}, {"ttl": 5, "on_busy": "defer"},
                {"ttl": 5, "slots": 0}, {"ttl": 5, "wait": -1}):
        with pytest.raises(ValueError):
            client.lease("x", **bad)
    assert client.db.leases.read("x") == []


def test_a_long_name_is_taken_hashed_as_docs_leases_md_says(client: jobwarden.Client) -> None:
    """Issue 28: ``client.lease("L" * 10240)`` was refused ("at most 200") while
    docs/leases.md ("Long names") and structs/leases.py hash longer names."""
    name = "L" * 10240
    with client.lease(name, ttl=30, owner="me") as lease:
        assert lease.held
        assert client.db.leases.owner_of(name) == "me"
        with pytest.raises(jobwarden.LeaseBusy):
            client.lease(name, ttl=30).acquire()
    [row] = client.db.leases.read(lease_name(name))
    assert len(row.name) == MAX_NAME_LENGTH and row.name.startswith("L" * 135 + "#")
    assert row.owner is None


def test_one_guard_entered_by_two_threads_and_nested_releases_each_ones_own(
        client: jobwarden.Client) -> None:
    """A guard keeps each thread's open ``with`` blocks apart (a stack per thread)."""
    guard = client.lease("shared-guard", ttl=30, slots=3)
    a_inside, go = threading.Event(), threading.Event()
    held: list[leases.Lease] = []

    def hold() -> None:
        with guard as outer, guard as inner:  # nested on one thread: two slots
            held.extend([outer, inner])
            a_inside.set()
            go.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    assert a_inside.wait(10)
    with pytest.raises(leases.LeaseBusy), guard as mine, guard:  # the third slot, then none
        pass
    assert mine.released  # this thread's outer lease, not the other thread's
    assert not any(lease.released for lease in held)
    go.set()
    other.join(10)
    assert all(lease.released and not lease.lost for lease in held)
    assert [r.owner for r in client.db.leases.read("shared-guard")] == [None, None, None]
    assert guard._entered == {}  # nothing left behind by either thread
