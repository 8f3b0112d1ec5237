"""What an uncontended lease pair costs the database, and what keeps it cheap (issue 16).

A pair is two statements, one round trip each: the acquire (a durable commit)
and the release (an asynchronous one), each a call of a PL/pgSQL function of
migration 0014 (whose statements keep their plans in the server process). These
tests pin those properties; the speed itself lives in bench/.
"""

from __future__ import annotations

import psycopg
import psycopg.connection

import jobwarden
from jobwarden.db.database import Database


def test_a_pair_is_two_round_trips(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        with client.lease("cost", ttl=30):  # the pool's connection is open
            pass
        waits = 0
        original = psycopg.connection.Connection.wait

        def counted(self: psycopg.Connection[object], *args: object, **kwargs: object) -> object:
            nonlocal waits
            waits += 1
            return original(self, *args, **kwargs)  # type: ignore[arg-type]

        psycopg.connection.Connection.wait = counted  # type: ignore[assignment,method-assign]
        try:
            for _ in range(5):
                with client.lease("cost", ttl=30):
                    pass
        finally:
            psycopg.connection.Connection.wait = original  # type: ignore[method-assign]
        assert waits == 10  # one round trip per acquire and per release, nothing else


def test_release_commits_asynchronously_and_acquire_durably(dsn: str) -> None:
    """The functions set synchronous_commit for their own transaction only: an acquire
    is never asynchronous (even where the server or role says off), a release is."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # a server or role configured so
        with conn.transaction():
            conn.execute("SELECT * FROM jobwarden.lease_acquire('dur', 0, 'o', 'h', 30, "
                         "NULL, NULL)")
            during = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert during == ("local",)  # raised for the acquire's transaction only
        conn.execute("SET synchronous_commit = on")
        with conn.transaction():
            conn.execute("SELECT jobwarden.lease_release('dur', 0, 'o', NULL, true, 'a', 'b')")
            during = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert during == ("off",)
        after = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert after == ("on",)  # nothing outlives the transaction (pooler-safe)
