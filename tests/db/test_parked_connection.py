"""The one idle connection a Pool keeps parked for its next checkout (db/pool.py).

It must never hold a connection back from anyone: the pool's own callers take
it first, whoever takes connections from the psycopg pool directly gets it back
first, a connection in a transaction is never parked, and a parked connection
the server closed is replaced like any pooled one.
"""

from __future__ import annotations

import time

import psycopg

import jobwarden
from jobwarden.db.database import Database
from tests.support.waiting import wait_for


def _backend(db: Database) -> int:
    with db.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_pool_of_one_serves_every_path_with_its_parked_connection(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1, timeout=2) as db:
        client = jobwarden.Client(database=db)
        with client.lease("parked", ttl=30):
            pass
        first = _backend(db)  # the parked connection, not a wait for the pool's one
        with db.transaction() as conn:
            conn.execute("SELECT 1")
        assert db.row("db_now") is not None
        with client.lease("parked", ttl=30):
            pass
        assert _backend(db) == first


def test_whoever_takes_connections_from_the_psycopg_pool_can_take_them_all(dsn: str) -> None:
    with Database(dsn, min_size=2, max_size=2, timeout=2) as db:
        client = jobwarden.Client(database=db)
        with client.lease("parked", ttl=30):
            pass
        held = [db.pool.getconn(timeout=2) for _ in range(2)]  # the parked one came back
        for conn in held:
            db.pool.putconn(conn)


def test_a_connection_left_in_a_transaction_is_not_parked(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        with db.connection() as conn:
            conn.autocommit = False
            conn.execute("SELECT 1")  # a transaction left open
        assert db.connections._parked == []
        with db.connection() as conn:  # the psycopg pool rolled it back
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            conn.autocommit = True


def test_a_parked_connection_the_server_closed_is_replaced(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        with client.lease("parked", ttl=30):
            pass
        victim = _backend(db)
        assert len(db.connections._parked) == 1
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
            wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                           (victim,)).fetchone() == (0,),
                     message="the parked connection's backend to exit")
        with client.lease("parked", ttl=30) as lease:  # no error: checked, replaced
            assert lease.token > 0
        assert _backend(db) != victim


def test_a_parked_connection_past_its_max_lifetime_is_rotated(dsn: str) -> None:
    # psycopg_pool enforces max_lifetime when a connection comes back to it; one kept
    # parked and reused would otherwise live on the same backend for ever.
    with Database(dsn, min_size=1, max_size=1, timeout=5) as db:
        client = jobwarden.Client(database=db)
        with client.lease("parked", ttl=30):
            pass
        (parked,) = db.connections._parked
        old = _backend(db)
        parked._expire_at = time.monotonic() - 1  # type: ignore[attr-defined]
        assert _backend(db) != old
        assert parked.closed
