"""The capped claim runs from per-connection prepared statements (issue 16, latency).

Why it matters: the simple protocol of the one-round-trip claim planned its
five-CTE statement on every claim (0.3 ms of server time, more than running
it). These tests pin what the shortcut must keep: the same claims, a plan that
still walks the claim index when the server settles on a generic one, and
plain text again, with nothing claimed twice or lost, when a pooler hands the
message to a server connection that never saw the PREPARE.
"""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.db.prepared import prepared_form
from tests.support import testjobs


def _register(db: Database, host: str, cap: int | None) -> None:
    db.hosts.register(host=host, pool="default", code_version="", cap=cap,
                      worker_id=uuid.uuid4(), pid=os.getpid(), concurrency=4, queues=[])


def _prepared_on_server(db: Database) -> set[str]:
    with db.connection() as conn:
        return {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")}


@pytest.mark.parametrize("queues", [None, ["default"]])
def test_a_capped_claim_executes_prepared_statements_and_claims_as_before(
        client: jobwarden.Client, db: Database, queues: list[str] | None) -> None:
    _register(db, "h", cap=2)
    ids = [client.enqueue(testjobs.Noop).id for _ in range(3)]
    claimed = db.jobs.claim(host="h", limit=5, grace_seconds=30, queues=queues, host_cap=True)
    assert [c.id for c in claimed] == ids[:2]  # the cap, read under the host row's lock
    assert db.jobs.claim(host="h", limit=5, grace_seconds=30, queues=queues,
                         host_cap=True) == []
    name = "job_claim_capped_queues" if queues else "job_claim_capped_any"
    statement = prepared_form(name, db.sql(name))[0]
    lock = prepared_form("host_claim_lock", db.sql("host_claim_lock"))[0]
    assert {statement, lock} <= _prepared_on_server(db)
    assert db.prepared.enabled


def test_a_statement_lost_by_a_pooler_falls_back_to_text_without_a_double_claim(
        dsn: str) -> None:
    """DEALLOCATE behind the client's back: what a transaction-mode pooler does when
    it hands the next transaction to a server connection without the statement."""
    with Database(dsn, min_size=1, max_size=1) as db:  # one connection: the one we break
        client = jobwarden.Client(database=db)
        _register(db, "h", cap=None)
        first = client.enqueue(testjobs.Noop).id
        assert [c.id for c in db.jobs.claim(host="h", limit=1, grace_seconds=30,
                                            host_cap=True)] == [first]
        second = client.enqueue(testjobs.Noop).id
        with db.connection() as conn:
            conn.execute("DEALLOCATE ALL")
        again = db.jobs.claim(host="h", limit=5, grace_seconds=30, host_cap=True)
        assert [c.id for c in again] == [second]
        assert client.job(first).attempts == 1 and client.job(second).attempts == 1
        assert not db.prepared.enabled  # plain text from now on
        third = client.enqueue(testjobs.Noop).id
        assert [c.id for c in db.jobs.claim(host="h", limit=5, grace_seconds=30,
                                            host_cap=True)] == [third]


PENDING = 20_000


@pytest.mark.parametrize("name", ["job_claim_capped_any", "job_claim_capped_queues"])
def test_the_generic_plan_of_a_prepared_claim_walks_the_claim_index(
        db: Database, dsn: str, name: str) -> None:
    """The server may switch a prepared statement to a generic plan (parameters
    unknown): that plan must not sort or scan the pending rows either."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data) SELECT 'm:noop', "
                     "jsonb_build_object('i', g) FROM generate_series(1, %s) AS g",
                     (PENDING,))
        conn.execute("VACUUM ANALYZE jobwarden.jobs")
        statement, order, prepare = prepared_form(name, db.sql(name))
        conn.execute(prepare.encode())
        conn.execute("SET plan_cache_mode = force_generic_plan")
        values = {"batch": uuid.uuid4(), "host": "probe", "grace": 60.0, "limit": 10,
                  "queues": ["default"], "wake_channel": "probe", "wake_queues": None,
                  "wake_free": 4, "wake_seconds": 60.0}
        binder = psycopg.ClientCursor(conn)
        execute = binder.mogrify(f"EXPLAIN EXECUTE {statement}"
                                 f"({', '.join('%s' for _ in order)})",
                                 [values[key] for key in order])
        shown = "\n".join(r[0] for r in conn.execute(execute.encode()))
    assert "jobs_claim_" in shown, shown
    assert "Sort" not in shown and "Seq Scan on jobs" not in shown, shown
