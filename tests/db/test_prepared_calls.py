"""The lease calls as protocol-level prepared statements named by their text (db/calls.py).

What must hold: each pooled connection parses a call once and then only binds
it; a server connection that lost the statement (a pooler hopping between
server connections, a DEALLOCATE) costs one plain-text call and nothing else;
a pool that keeps losing them sends plain text for good; and a statement's name
names its text, so a same-named statement elsewhere can only be the same one.
"""

from __future__ import annotations

import psycopg
import pytest

import jobwarden
from jobwarden import errors
from jobwarden.db.calls import MISSES_BEFORE_PLAIN, PreparedCall
from jobwarden.db.database import Database


def _server_statements(db: Database) -> list[str]:
    with db.connection() as conn:
        return [r[0] for r in conn.execute(
            "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'jw_lease_%'"
        ).fetchall()]


def test_a_pair_prepares_its_two_calls_once_per_connection(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        for _ in range(3):
            with client.lease("prepared", ttl=30) as lease:
                assert lease.token > 0
        statements = _server_statements(db)
        # lease_acquire (the name's first use), lease_take and lease_free: once each.
        assert len(statements) == 3
        assert any("lease_acquire($1, $2" in s and "$7)" in s for s in statements)
        assert sum('UPDATE "jobwarden".leases' in s and "%(" not in s for s in statements) == 2
        assert db.connections.prepared_misses == 0


def test_a_lost_statement_runs_as_plain_text_then_is_prepared_again(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        first = client.lease("lost", ttl=30).acquire()
        assert first.release() is True
        with db.connection() as conn:
            conn.execute("DEALLOCATE ALL")  # as a pooler's other server connection would be
        second = client.lease("lost", ttl=30).acquire()  # nothing ran twice, nothing failed
        assert second.token > first.token
        assert db.leases.read("lost")[0].token == second.token
        assert db.connections.prepared_misses == 1
        assert second.release() is True  # the release, lost too, ran as plain text
        assert db.connections.prepared_misses == 2
        assert db.leases.read("lost")[0].owner is None
        with client.lease("lost", ttl=30):  # prepared again
            pass
        assert len(_server_statements(db)) == 2
        assert db.connections.prepared_misses == 2


def test_a_pool_that_keeps_losing_statements_sends_plain_text(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        for _ in range(2 * MISSES_BEFORE_PLAIN):  # a pair after a DEALLOCATE misses
            with client.lease("plain", ttl=30):
                pass
            with db.connection() as conn:
                conn.execute("DEALLOCATE ALL")
        assert db.connections.prepared_misses >= MISSES_BEFORE_PLAIN
        for _ in range(2):
            with client.lease("plain", ttl=30) as lease:
                assert lease.token > 0
        assert _server_statements(db) == []  # nothing prepared any more


def test_release_stays_owner_and_token_fenced(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        held = db.leases.try_acquire(name="fenced", owner="a", ttl_seconds=30)
        assert held.acquired and held.token is not None
        assert db.leases.release(name="fenced", owner="b", token=held.token) is False
        assert db.leases.release(name="fenced", owner="a", token=held.token + 1) is False
        assert db.leases.read("fenced")[0].owner == "a"
        assert db.leases.release(name="fenced", owner="a", token=held.token) is True


def test_statement_names_name_their_text() -> None:
    """A pooler may hand a Bind to a server connection another client prepared on:
    only the same text may ever carry the same name (psycopg's _pg3_<n> names do not)."""
    one = PreparedCall.of("lease_acquire", "SELECT * FROM a.lease_acquire(%(name)s)")
    same = PreparedCall.of("lease_acquire", "SELECT * FROM a.lease_acquire(%(name)s)")
    other = PreparedCall.of("lease_acquire", "SELECT * FROM b.lease_acquire(%(name)s)")
    assert one.statement == same.statement
    assert one.statement != other.statement
    assert one.body == b"SELECT * FROM a.lease_acquire($1)"


def test_errors_are_translated_as_on_the_plain_path(dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        with pytest.raises(psycopg.errors.CheckViolation):  # as the plain statement raised
            db.call("lease_acquire", {"name": "x" * 201, "slot": 0, "owner": "a", "host": None,
                                      "ttl": 30.0, "job_id": None, "claim_token": None})
        assert db.leases.try_acquire(name="ok", owner="a", ttl_seconds=30).acquired
        with db.connection() as conn:
            conn.execute("DROP FUNCTION jobwarden.lease_acquire")
        with pytest.raises(errors.SchemaMissing):
            db.leases.try_acquire(name="gone", owner="a", ttl_seconds=30)
