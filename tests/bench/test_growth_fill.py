"""The growth curves' SQL fill leaves what each system's own API and worker leave.

``bench.growth`` loads a million rows straight into each system's tables
(``System.fill``) instead of enqueueing them; its figures compare like with
like only if those rows are the ones the system itself would have written.
So for every system installed here: jobs enqueued and run by the system's
own client and worker in one database, the same numbers filled by SQL in
another, and every table's rows (by status or event type where the table has
one) must match. The probe (``System.claim_latencies``) must give back what
it claimed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from typing import Any

import psycopg
import pytest

from bench import adapters, databases, measure
from bench.adapters import base

PEER_MODULES = {"jobwarden": "jobwarden", "procrastinate": "procrastinate",
                "pgqueuer": "pgqueuer"}

# Per system, what is counted: (table, the grouping column or None for a plain count).
# Worker bookkeeping (registered hosts and workers, gone after a graceful stop)
# is counted too; schema bookkeeping and pgqueuer's statistics (folded in by a
# periodic task, on its own schedule) are not.
SHAPES: dict[str, list[tuple[str, str | None]]] = {
    "jobwarden": [("jobwarden.jobs", "status::text"), ("jobwarden.job_attempts", "outcome"),
                  ("jobwarden.workers", None), ("jobwarden.hosts", None)],
    "procrastinate": [("procrastinate_jobs", "status::text"),
                      ("procrastinate_events", "type::text"), ("procrastinate_workers", None)],
    "pgqueuer": [("pgqueuer", "status::text"), ("pgqueuer_log", "status::text")],
}
PENDING_STATUS = {"jobwarden": "pending", "procrastinate": "todo", "pgqueuer": "queued"}


def _shape(dsn: str, system: str) -> dict[str, dict[str, int]]:
    shape: dict[str, dict[str, int]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, column in SHAPES[system]:
            group = column or "'rows'"
            rows = conn.execute(
                f"SELECT {group}, count(*) FROM {table} GROUP BY 1"  # noqa: S608 (constants)
            ).fetchall()
            shape[table] = {str(key): int(count) for key, count in rows}
    return shape


async def _through_the_api(system: base.System, dsn: str, *, completed: int,
                           pending: int) -> None:
    await system.install(dsn)
    async with system.client(dsn) as client:
        await measure.drain(system.name, dsn, client, jobs=completed,
                            setting=base.WorkerSetting("best", None), timeout=60)
        await client.enqueue_batch(completed, pending)


def _peer(name: str) -> base.System:
    """The peer's adapter, or a skip where its library (the bench extra) is missing."""
    if importlib.util.find_spec(PEER_MODULES[name]) is None:
        pytest.skip(f"{name} is not installed (the bench extra)")
    return adapters.load(name)


async def _filled(system: base.System, dsn: str, *, completed: int, pending: int) -> None:
    await system.install(dsn)
    await system.fill(dsn, pending=pending, completed=completed)


@pytest.mark.parametrize("name", sorted(PEER_MODULES))
def test_fill_leaves_the_rows_the_systems_own_enqueue_and_worker_leave(
        pg_server: str, name: str) -> None:
    system = _peer(name)
    tag = uuid.uuid4().hex[:8]
    with databases.fresh_database(pg_server, f"bench_fill_api_{tag}") as api_dsn, \
            databases.fresh_database(pg_server, f"bench_fill_sql_{tag}") as sql_dsn:
        asyncio.run(_through_the_api(system, api_dsn, completed=5, pending=3))
        asyncio.run(_filled(system, sql_dsn, completed=5, pending=3))
        through_api = _shape(api_dsn, name)
        assert sum(through_api[SHAPES[name][0][0]].values()) > 0
        assert _shape(sql_dsn, name) == through_api


@pytest.mark.parametrize("name", sorted(PEER_MODULES))
def test_claim_probe_claims_one_job_per_sample_and_gives_them_back(
        pg_server: str, name: str) -> None:
    system = _peer(name)
    with databases.fresh_database(pg_server, f"bench_probe_{uuid.uuid4().hex[:8]}") as dsn:
        asyncio.run(_filled(system, dsn, completed=0, pending=10))
        before, versions = _shape(dsn, name), _row_versions(dsn, name)
        timings: list[Any] = asyncio.run(system.claim_latencies(dsn, samples=4))
        after, touched = _shape(dsn, name), _row_versions(dsn, name)
    assert len(timings) == 4 and all(t > 0 for t in timings)
    main_table = SHAPES[name][0][0]
    # Four rows were written (claimed, then given back), one per sample...
    assert len(set(touched.items()) - set(versions.items())) == 4
    # ... and all ten are pending again, none left claimed.
    assert after[main_table] == before[main_table] == {PENDING_STATUS[name]: 10}


def _row_versions(dsn: str, system: str) -> dict[int, str]:
    """Each job row's id and the transaction that last wrote it."""
    table = SHAPES[system][0][0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, xmin::text FROM {table}").fetchall()  # noqa: S608
    return {int(id_): str(xmin) for id_, xmin in rows}
