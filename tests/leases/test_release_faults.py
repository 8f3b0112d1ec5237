"""Lease.release is honest when the database does not answer (issue #12, defect 4).

Faults are injected against the real database: a second session holds the
lease row locked, so the holder's release statement fails on its
``lock_timeout`` (an error, not a hang); or the release commits and the reply is
dropped on the way back (the call then raises as a lost connection would).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import jobwarden
from jobwarden import errors
from jobwarden.db.database import Database


@pytest.fixture
def impatient(dsn: str) -> Iterator[jobwarden.Client]:
    """A client whose statements give up after 50 ms waiting for a row lock."""
    params = conninfo.conninfo_to_dict(dsn)
    params["options"] = "-c lock_timeout=50"
    database = Database(conninfo.make_conninfo(**params), min_size=1, max_size=2)
    yield jobwarden.Client(database=database)
    database.close()


def _owner(dsn: str, name: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT owner FROM jobwarden.leases WHERE name = %s",
                           (name,)).fetchone()
    return row[0] if row else None


RowLock = tuple[threading.Event, Callable[[], None], threading.Event]


@pytest.fixture
def row_lock(dsn: str) -> Iterator[RowLock]:
    """(locked, start, unlock): a session that locks every lease row until unlocked."""
    locked, unlock = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1 FROM jobwarden.leases FOR UPDATE")
            locked.set()
            unlock.wait(30)
            conn.rollback()

    thread = threading.Thread(target=hold, daemon=True)
    yield locked, thread.start, unlock
    unlock.set()
    if thread.is_alive():
        thread.join(10)


def test_a_release_the_database_refused_is_reported_and_can_be_retried(
        impatient: jobwarden.Client, dsn: str, row_lock: RowLock) -> None:
    locked, start, unlock = row_lock
    lease = impatient.lease("honest", ttl=60).acquire()
    start()
    assert locked.wait(10)
    with pytest.raises(jobwarden.LeaseNotReleased):
        lease.release(retry_seconds=0.3)
    # Not released in the database, and the holder was not told otherwise.
    assert _owner(dsn, "honest") == lease.owner
    assert not lease.released and not lease.lost
    unlock.set()
    # A second call goes to the database again (it used to return True untouched).
    assert lease.release() is True
    assert _owner(dsn, "honest") is None
    assert lease.released and not lease.held


def test_release_retries_until_the_database_answers(
        impatient: jobwarden.Client, dsn: str, row_lock: RowLock) -> None:
    locked, start, unlock = row_lock
    lease = impatient.lease("patient", ttl=60).acquire()
    start()
    assert locked.wait(10)
    failures: list[Exception] = []
    real = impatient.db.leases.release

    def observed(**kwargs: Any) -> bool:
        try:
            return real(**kwargs)
        except errors.DatabaseUnavailable as exc:
            failures.append(exc)
            if len(failures) == 2:
                unlock.set()  # the database "comes back" after two failed tries
            raise

    impatient.db.leases.release = observed  # type: ignore[method-assign]
    assert lease.release(retry_seconds=30) is True
    assert len(failures) == 2
    assert _owner(dsn, "patient") is None


def test_a_release_that_committed_with_its_reply_lost_is_a_release_not_a_loss(
        client: jobwarden.Client, dsn: str) -> None:
    lease = client.lease("lost-reply", ttl=60).acquire()
    real = client.db.leases.release
    calls: list[bool] = []

    def reply_lost(**kwargs: Any) -> bool:
        found = real(**kwargs)  # commits in the database
        calls.append(found)
        if len(calls) == 1:
            raise errors.DatabaseUnavailable("server closed the connection unexpectedly")
        return found

    client.db.leases.release = reply_lost  # type: ignore[method-assign]
    lost: list[jobwarden.LeaseEvent] = []
    unsubscribe = jobwarden.coordination.leases.subscribe(
        lambda e: lost.append(e) if e.event == "lease_lost" else None)
    try:
        assert lease.release() is True
    finally:
        unsubscribe()
    assert calls == [True, False]  # the retry found it already free
    assert lease.released and not lease.lost and lost == []
    assert _owner(dsn, "lost-reply") is None
