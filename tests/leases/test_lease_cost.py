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
    """Both acquire paths (lease_take's UPDATE, the lease_acquire function) raise
    synchronous_commit off to local for their own transaction: an acquire is never
    asynchronous, even where the server or role says off; a release (lease_free) is.
    Nothing outlives the transaction (pooler-safe)."""
    params = {"name": "dur", "slot": 0, "owner": "o", "host": "h", "ttl": 30.0,
              "job_id": None, "claim_token": None, "token": None, "channel": "c"}
    with Database(dsn, min_size=1, max_size=1) as db, \
            psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # a server or role configured so
        for acquire in ("lease_acquire", "lease_take"):  # first use, then the hot path
            with conn.transaction():
                assert db.rows(acquire, params, conn=conn)[0][0] is True
                during = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
            assert during == ("local",), acquire
            conn.execute("SET synchronous_commit = on")
            with conn.transaction():
                assert db.rows("lease_free", params, conn=conn) != []
                during = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
            assert during == ("off",)
            after = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
            assert after == ("on",)
            conn.execute("SET synchronous_commit = off")
        with conn.transaction():  # with synchronous_commit on, the acquire leaves it on
            conn.execute("SET LOCAL synchronous_commit = on")
            assert db.rows("lease_take", params, conn=conn)[0][0] is True
            during = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert during == ("on",)  # never lowered (remote_apply etc. stay as configured)


def test_an_uncontended_pair_is_two_single_row_updates(dsn: str) -> None:
    """The hot path: after a name's first use, an acquire is lease_take and a release
    lease_free, one prepared UPDATE each; no function runs and the jobs table is not
    touched (no hand-over probe on a lease no job ever waited on)."""

    def counters(db: Database) -> tuple[object, ...]:
        with db.connection() as conn:  # the pool's one connection: its stats flushed
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute(
                "SELECT (SELECT n_tup_upd + n_tup_ins FROM pg_stat_user_tables"
                "        WHERE schemaname = 'jobwarden' AND relname = 'leases'),"
                "       (SELECT n_tup_upd + coalesce(idx_scan, 0) + coalesce(seq_scan, 0)"
                "        FROM pg_stat_user_tables"
                "        WHERE schemaname = 'jobwarden' AND relname = 'jobs'),"
                "       (SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions)").fetchone()
        assert row is not None
        return tuple(row)

    with Database(dsn, min_size=1, max_size=1) as db:
        with db.connection() as conn:
            conn.execute("SET track_functions = 'pl'")  # count PL/pgSQL calls
        client = jobwarden.Client(database=db)
        with client.lease("hot", ttl=30):  # first use: the function inserts the row
            pass
        leases, jobs, calls = counters(db)
        assert calls == 1
        for _ in range(5):
            with client.lease("hot", ttl=30):
                pass
        after = counters(db)
    assert after == (leases + 10, jobs, calls)  # five acquires, five releases: 10 UPDATEs
