"""Claims walk the claim index, however many pending rows there are (issue 16).

Not a timing bound: the plan itself. A claim that sorts every pending row is
O(n) in the table's size; bench.growth measured it (a claim over 100,000
pending jobs took 130 ms instead of 1 ms). The cause was the pause check's
estimate on a table with one queue, so the table here has one queue and fresh
statistics, as autovacuum would leave it. The capped claims (every worker's,
through the host registry) have a LIMIT the planner cannot read, so it guessed
a tenth of the table for the picked rows and hashed the whole table to update
them (150 ms per claim at 100,000 pending): the claimed rows are now looked up
by id (``fragment_claim_rows``).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from jobwarden.db.database import Database

PENDING = 20_000


@pytest.fixture
def big_table(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data) SELECT 'm:noop', "
                     "jsonb_build_object('i', g) FROM generate_series(1, %s) AS g", (PENDING,))
        conn.execute("VACUUM ANALYZE jobwarden.jobs")
    return dsn


def plan(db: Database, dsn: str, name: str) -> str:
    params = {"batch": uuid.uuid4(), "host": "probe", "grace": 60.0, "limit": 10,
              "queues": ["default"]}
    with psycopg.connect(dsn) as conn:
        text = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + db.sql(name), params))  # type: ignore[operator]
        conn.rollback()
    return text


@pytest.mark.parametrize("name", ["job_claim_any", "job_claim_queues", "job_claim_capped_any",
                                  "job_claim_capped_queues"])
@pytest.mark.parametrize("paused", [False, True])
def test_a_claim_walks_the_claim_index_instead_of_sorting_every_pending_row(
        db: Database, big_table: str, name: str, paused: bool) -> None:
    if paused:
        db.queues.pause("elsewhere")
    shown = plan(db, big_table, name)
    assert "jobs_claim_" in shown, shown
    assert "Sort" not in shown and "Seq Scan on jobs" not in shown, shown
