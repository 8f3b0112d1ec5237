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

import re
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


#: A claimant marking itself for wake-ups (fragment_claim_rows, migration 0025).
WAKE = {"wake_channel": "probe", "wake_queues": None, "wake_free": 4, "wake_seconds": 60.0}


def plan(db: Database, dsn: str, name: str) -> str:
    params = {"batch": uuid.uuid4(), "host": "probe", "grace": 60.0, "limit": 10,
              "queues": ["default"], **WAKE}
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


@pytest.fixture
def piled_pod_runs(dsn: str) -> str:
    """Pending pod runs piled up at the front of the claim order (no operator ran):
    older and of higher priority than the pool's few pending jobs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data, priority, run_at, pod_run) "
                     "SELECT 'm:export', '{}', 10, now() - interval '1 day', "
                     "'JobSchedule/team-a/nightly' FROM generate_series(1, %s)", (PENDING,))
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data) "
                     "SELECT 'm:noop', '{}' FROM generate_series(1, 20)")
        conn.execute("VACUUM ANALYZE jobwarden.jobs")
    return dsn


def analyzed(db: Database, dsn: str, name: str) -> str:
    """The executed plan (EXPLAIN ANALYZE) of a claim, rolled back: rows really walked."""
    params = {"batch": uuid.uuid4(), "host": "probe", "grace": 60.0, "limit": 10,
              "queues": ["default"], **WAKE}
    with psycopg.connect(dsn) as conn:
        text = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
            + db.sql(name), params))  # type: ignore[operator]
        conn.rollback()
    return text


@pytest.mark.parametrize("name", ["job_claim_any", "job_claim_queues", "job_claim_capped_any",
                                  "job_claim_capped_queues"])
def test_pending_pod_runs_never_enter_a_workers_claim(
        db: Database, piled_pod_runs: str, name: str) -> None:
    """The worker's claim index holds pool runs only (migration 0015): 20,000 pending pod
    runs ahead of the pool's jobs in claim order are not walked and filtered out by each
    claim (with the index of 0001 the scan removed every one of them by its filter)."""
    if "capped" in name:  # a registered host, so the capped claim walks the index at all
        db.hosts.register(host="probe", pool="p", code_version="1", cap=None,
                          worker_id=uuid.uuid4(), pid=1, concurrency=10, queues=["default"])
    shown = analyzed(db, piled_pod_runs, name)
    scan = [line for line in shown.splitlines() if "Scan using jobs_claim_pool_" in line]
    # Walked: ten pool jobs claimed (PostgreSQL 18 prints "rows=10.00").
    assert scan and re.search(r"actual rows=10(\.0+)? ", scan[0]), shown
    assert "Rows Removed by Filter" not in shown, shown
    assert "Sort" not in shown and "Seq Scan on jobs" not in shown, shown


@pytest.mark.parametrize(("name", "params"), [
    ("job_oldest_pending", {}), ("job_scheduled_counts", {}), ("queue_list", {"window": 60}),
])
def test_the_pending_gauges_read_the_partial_indexes_not_the_table(
        db: Database, dsn: str, name: str, params: dict[str, object]) -> None:
    """They count pool and pod runs alike, each half from its own partial index, so a
    table of mostly finished jobs is not read whole for them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data, status, finished_at) "
                     "SELECT 'm:old', '{}', 'completed', now() - interval '2 days' "
                     "FROM generate_series(1, %s)", (PENDING,))
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data, pod_run) "
                     "SELECT 'm:x', '{}', CASE WHEN g % 2 = 0 THEN 'ExclusiveJob/a/b' END "
                     "FROM generate_series(1, 40) AS g")
        conn.execute("VACUUM ANALYZE jobwarden.jobs")
        shown = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + db.sql(name), params))  # type: ignore[operator]
    assert "Seq Scan on jobs" not in shown, shown
