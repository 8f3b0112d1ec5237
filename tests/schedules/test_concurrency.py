"""Many runners, one database: exactly one job per slot, and every slot accounted for.

Eight real processes loop ``enqueue_due`` on the real database clock against
the same schedules (1-second intervals), as workers, the operator and other
clusters would. The row lock splits the work; the unique key would catch a
second job; the counts must add up to the jobs that exist.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
from typing import Any

import psycopg
import pytest

from jobwarden.api.client import Client
from tests.support import schedulejobs

PROCESSES = 8
SCHEDULES = 10
SECONDS = 4.0


@pytest.mark.slow
def test_eight_runner_processes_enqueue_exactly_one_job_per_slot_with_no_gaps(
        client: Client, dsn: str) -> None:
    names = [f"every-second-{n}" for n in range(SCHEDULES)]
    for name in names:
        # catch-up 'all': a runner that falls behind still enqueues every slot, so
        # any gap would be a lost slot, not a catch-up decision.
        client.schedules.upsert(name, interval="1s", job_class="tests.support.schedulejobs:Tick",
                                catch_up="all", catch_up_max=100)
    # forkserver: the package is imported once (preload), each runner forks from that
    # clean process (no inherited pool or threads from this test process).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.support.schedulejobs"])
    barrier = context.Barrier(PROCESSES)
    results: Any = context.Queue()
    processes = [context.Process(target=schedulejobs.run_runner,
                                 args=(dsn, SECONDS, barrier, results))
                 for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    reports = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schedule_name, unique_key FROM jobwarden.jobs ORDER BY schedule_name, "
            "unique_key").fetchall()
    assert sum(r["enqueued"] for r in reports) == len(rows)
    assert sum(r["errors"] for r in reports) == 0
    assert sum(r["missed"] for r in reports) == 0
    assert sum(r["duplicates"] for r in reports) == 0  # the row lock, not the unique key
    busy = [r for r in reports if r["enqueued"]]
    assert len(busy) >= 2, f"only one runner ever won a schedule: {reports}"

    for name in names:
        record = client.schedules.get(name)
        assert record is not None and record.planned_until is not None
        slots = [dt.datetime.fromisoformat(key.removeprefix(f"{name}:").replace("Z", "+00:00"))
                 for schedule, key in rows if schedule == name]
        assert len(slots) == len(set(slots))
        # No gaps: every second from the first slot after creation to the last planned.
        expected_first = record.created_at.replace(microsecond=0) + dt.timedelta(seconds=1)
        expected_last = record.planned_until.replace(microsecond=0)
        span = int((expected_last - expected_first).total_seconds()) + 1
        assert slots == [expected_first + dt.timedelta(seconds=s) for s in range(span)]
        assert span >= SECONDS
        assert (record.enqueued_count, record.missed_count, record.skipped_count) == (
            len(slots), 0, 0)
