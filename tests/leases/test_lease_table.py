"""The leases table: one statement per decision, owner-fenced, tokens that only go up."""

from __future__ import annotations

import threading
import time

import pytest

from jobwarden.db.database import Database
from jobwarden.structs.leases import MAX_NAME_LENGTH, HeldLease, lease_name
from tests.support.waiting import wait_for


def test_a_free_lease_is_taken_and_refused_to_others_until_released(db: Database) -> None:
    first = db.leases.try_acquire(name="report", owner="a", ttl_seconds=30, host="host-a")
    assert first.acquired and first.token is not None

    busy = db.leases.try_acquire(name="report", owner="b", ttl_seconds=30)
    assert not busy.acquired
    assert (busy.holder, busy.holder_host) == ("a", "host-a")
    assert 29 < busy.retry_after <= 30
    assert db.leases.owner_of("report") == "a"

    assert db.leases.release(name="report", owner="a", token=first.token)
    second = db.leases.try_acquire(name="report", owner="b", ttl_seconds=30)
    assert second.acquired and second.token is not None
    assert second.token > first.token


def test_an_expired_lease_is_taken_over_and_the_old_owner_can_neither_renew_nor_release(
        db: Database) -> None:
    old = db.leases.try_acquire(name="nightly", owner="old", ttl_seconds=0.2)
    assert old.acquired and old.token is not None
    wait_for(lambda: db.leases.owner_of("nightly") is None, message="lease lapsed")

    new = db.leases.try_acquire(name="nightly", owner="new", ttl_seconds=30)
    assert new.acquired and new.token is not None and new.token > old.token

    assert db.leases.renew(name="nightly", owner="old", token=old.token, ttl_seconds=30) is None
    assert not db.leases.release(name="nightly", owner="old", token=old.token)
    assert db.leases.owner_of("nightly") == "new"


def test_an_owner_reacquiring_its_name_cannot_use_its_previous_token(db: Database) -> None:
    old = db.leases.try_acquire(name="same-owner", owner="me", ttl_seconds=0.2)
    wait_for(lambda: db.leases.owner_of("same-owner") is None, message="lease lapsed")
    new = db.leases.try_acquire(name="same-owner", owner="me", ttl_seconds=30)
    assert new.acquired
    assert not db.leases.release(name="same-owner", owner="me", token=old.token)
    assert db.leases.release(name="same-owner", owner="me", token=new.token)


def test_renewal_extends_the_lease_on_the_database_clock(db: Database) -> None:
    held = db.leases.try_acquire(name="renewed", owner="a", ttl_seconds=1)
    assert held.expires_at is not None
    renewal = db.leases.renew(name="renewed", owner="a", token=held.token, ttl_seconds=60)
    assert renewal is not None
    assert 59 < renewal.remaining_seconds <= 60
    assert renewal.expires_at > held.expires_at
    [record] = db.leases.read("renewed")
    assert record.expires_at == renewal.expires_at


def test_a_lapsed_lease_nobody_took_can_still_be_renewed_by_its_holder(db: Database) -> None:
    held = db.leases.try_acquire(name="lapsed", owner="a", ttl_seconds=0.1)
    wait_for(lambda: db.leases.owner_of("lapsed") is None, message="lease lapsed")
    assert db.leases.renew(name="lapsed", owner="a", token=held.token, ttl_seconds=30)
    assert db.leases.owner_of("lapsed") == "a"


def test_of_many_concurrent_acquirers_exactly_one_wins(db: Database) -> None:
    barrier = threading.Barrier(8)
    winners: list[str] = []

    def contend(owner: str) -> None:
        barrier.wait()
        if db.leases.try_acquire(name="race", owner=owner, ttl_seconds=30).acquired:
            winners.append(owner)

    threads = [threading.Thread(target=contend, args=(f"o{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert db.leases.owner_of("race") == winners[0]


def test_long_names_are_hashed_deterministically_with_a_readable_prefix() -> None:
    long = "report:" + "x" * 400
    other = "report:" + "x" * 399 + "y"
    hashed = lease_name(long)
    assert len(hashed) == MAX_NAME_LENGTH
    assert hashed == lease_name(long)
    assert hashed != lease_name(other)
    assert hashed.startswith("report:xxx")
    assert lease_name(hashed) == hashed
    assert lease_name("short") == "short"
    with pytest.raises(ValueError):
        lease_name("")


def test_a_long_name_is_one_lease_for_everyone(db: Database) -> None:
    long = "tenant:" + "z" * 300
    assert db.leases.try_acquire(name=long, owner="a", ttl_seconds=30).acquired
    assert not db.leases.try_acquire(name=long, owner="b", ttl_seconds=30).acquired
    assert db.leases.owner_of(long) == "a"
    assert [r.name for r in db.leases.list()] == [lease_name(long)]


def test_list_shows_held_leases_and_clear_keeps_the_token(db: Database) -> None:
    a = db.leases.try_acquire(name="a", owner="oa", ttl_seconds=30, host="h")
    db.leases.try_acquire(name="b", owner="ob", ttl_seconds=0.1)
    freed = db.leases.try_acquire(name="c", owner="oc", ttl_seconds=30)
    db.leases.release(name="c", owner="oc", token=freed.token)
    wait_for(lambda: db.leases.owner_of("b") is None, message="b lapsed")

    assert [(r.name, r.owner, r.holder_host) for r in db.leases.list()] == [("a", "oa", "h")]
    assert [r.name for r in db.leases.list(include_expired=True)] == ["a", "b"]

    assert db.leases.clear("a") == []  # held and not lapsed: needs force
    assert [r.name for r in db.leases.clear("b")] == ["b"]  # lapsed: cleared
    [cleared] = db.leases.clear("a", force=True)
    assert (cleared.owner, cleared.token) == ("oa", a.token)
    assert db.leases.list(include_expired=True) == []

    [row] = db.leases.read("a")
    assert row.owner is None and row.token == a.token
    again = db.leases.try_acquire(name="a", owner="x", ttl_seconds=30)
    assert again.token is not None and a.token is not None and again.token > a.token
    assert not db.leases.release(name="a", owner="oa", token=a.token)


def test_a_semaphore_has_at_most_n_holders(db: Database) -> None:
    got = [db.leases.try_acquire(name="sem", owner=f"o{i}", ttl_seconds=30, slots=3)
           for i in range(4)]
    assert [g.acquired for g in got] == [True, True, True, False]
    assert sorted(g.slot for g in got[:3]) == [0, 1, 2]
    assert got[3].holder in {"o0", "o1", "o2"}
    assert db.leases.release(name="sem", owner="o1", slot=got[1].slot, token=got[1].token)
    again = db.leases.try_acquire(name="sem", owner="o4", ttl_seconds=30, slots=3)
    assert again.acquired and again.slot == got[1].slot


def test_a_semaphore_never_exceeds_n_under_contention(db: Database) -> None:
    """Five owners contend for two slots until both slots were seen held at once and 40
    entries were made (however slow the machine); never more than two inside."""
    inside = 0
    peak = 0
    count_lock = threading.Lock()
    entries = 0
    enough = threading.Event()
    give_up = time.monotonic() + 120  # only a hung database ends it here

    def contend(owner: str) -> None:
        nonlocal inside, peak, entries
        while not enough.is_set() and time.monotonic() < give_up:
            got = db.leases.try_acquire(name="pool", owner=owner, ttl_seconds=30, slots=2)
            if not got.acquired:
                continue
            with count_lock:
                inside += 1
                entries += 1
                peak = max(peak, inside)
            time.sleep(0.002)  # hold the slot a moment, so that holders overlap
            with count_lock:
                inside -= 1
                if entries >= 40 and peak >= 2:
                    enough.set()
            assert db.leases.release(name="pool", owner=owner, slot=got.slot, token=got.token)

    threads = [threading.Thread(target=contend, args=(f"o{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2
    assert entries >= 40


def test_a_held_lease_always_has_an_expiry_whatever_wrote_it(db: Database) -> None:
    """The rule the dropped CHECK leases_held_has_expiry stated (migration 0018): every
    statement that writes a holder writes its expiry. Checked after each writer."""

    def holders_without_expiry() -> int:
        with db.connection() as conn:
            row = conn.execute("SELECT count(*) FROM jobwarden.leases "
                               "WHERE owner IS NOT NULL AND expires_at IS NULL").fetchone()
        assert row is not None
        return int(row[0])

    first = db.leases.try_acquire(name="rule", owner="a", ttl_seconds=30)  # insert
    assert first.acquired and first.token is not None
    assert db.leases.renew(name="rule", owner="a", token=first.token, ttl_seconds=60)
    held = db.leases.renew_many([HeldLease(name="rule", slot=0, owner="a", token=first.token,
                                           ttl_seconds=60)])
    assert held == {("rule", 0, first.token)}
    db.leases.mark_waiting("rule", seconds=1)
    assert holders_without_expiry() == 0
    assert db.leases.release(name="rule", owner="a", token=first.token)
    again = db.leases.try_acquire(name="rule", owner="b", ttl_seconds=30)  # lease_take
    assert again.acquired
    assert holders_without_expiry() == 0
    assert [r.owner for r in db.leases.clear("rule", force=True)] == ["b"]
    for owner in ("s1", "s2"):  # a semaphore's seeded rows, then its slot acquire
        assert db.leases.try_acquire(name="sem", owner=owner, ttl_seconds=30, slots=3).acquired
    assert holders_without_expiry() == 0
    with db.connection() as conn:
        free = conn.execute("SELECT count(*) FROM jobwarden.leases "
                            "WHERE owner IS NULL AND expires_at IS NOT NULL").fetchone()
    assert free == (0,)  # and a free row has none
