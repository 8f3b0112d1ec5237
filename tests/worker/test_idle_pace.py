"""What an idle worker costs the database, and that its slower pace misses nothing.

Why (issue 31): a fleet at rest is paid for by the database in transactions and
server connections per worker. An idle ``jobwarden worker`` once cost 1.49
transactions/s and held 3.2 connections. At rest it now polls at a pace that
backs off while its LISTEN connection is proven to hear NOTIFYs, refreshes its
host row and reaps at the idle pace, and runs its few calls over its LISTEN
connection (docs/capacity-planning.md). The counts here come from the server
itself (``pg_stat_database``, ``pg_stat_activity``): a bound derived from the
configured intervals, never a time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import conninfo

import jobwarden
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import TIMEOUT_SECONDS, wait_for

Spawn = Callable[..., object]


def _admin(dsn: str) -> tuple[str, str]:
    """(a DSN to the server's maintenance database, the test database's name): the
    counts are read from another database, so reading them costs the test's nothing."""
    params = conninfo.conninfo_to_dict(dsn)
    name = str(params["dbname"])
    params["dbname"] = "postgres"
    return conninfo.make_conninfo("", **params), name


def _transactions(admin: str, name: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


def _worker_connections(admin: str, name: str) -> tuple[int, int]:
    """The worker's server connections: (all, its LISTEN connection)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE application_name LIKE '%% listen') "
            "FROM pg_stat_activity WHERE datname = %s "
            "AND application_name LIKE 'jobwarden-worker:%%'", (name,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


#: Each server flushes a backend's counts within seconds of its transaction (at most
#: every 10 s for an idle backend): a window's count may hold this many seconds more.
FLUSH_SLACK_SECONDS = 10.0
WINDOW_SECONDS = 20.0


def _bound(window: float, *, idle: float, schedules: float, poll: float = 0.05) -> float:
    """The most transactions an idle worker may send in ``window`` seconds.

    Per idle pace: a claim poll (its next-due question rides in the same message)
    and a reaper pass; a host refresh per idle pace or minute; per schedule check
    one; the prune (every 60 s) and the LISTEN connection's silence check (every
    30 s without a call); each pace jittered by up to 10 %; plus one of each for
    the window's edges and the flush slack, and the retention lease; and the
    polls of the back-off itself, from ``poll`` doubling up to ``idle``.
    """
    span = window + FLUSH_SLACK_SECONDS
    refresh = min(idle, 60.0)  # at least five refreshes per stale period (300 s)
    rate = 2 / (0.9 * idle) + 1 / (0.9 * refresh) \
        + (1 / (0.9 * schedules) if schedules else 0.0) + 1 / 54 + 1 / 30
    ramp = math.ceil(math.log2(idle / poll)) + 1
    return span * rate + ramp + 8


@pytest.mark.parametrize(("idle", "schedules"), [
    pytest.param(2.0, 1.0, id="idle-2s-schedules-1s"),
    # The pure-LISTEN idle worker: an hour's idle pace, no schedule runner.
    pytest.param(3600.0, 0.0, id="pure-listen"),
])
def test_an_idle_worker_sends_what_its_intervals_allow_over_one_connection(
        spawn_worker: Spawn, dsn: str, idle: float, schedules: float) -> None:
    admin, name = _admin(dsn)
    # Polls every 50 ms (conftest's worker_command) until LISTEN is verified: without
    # the idle pace that alone would be 20 transactions a second.
    spawn_worker("--host", "idle", "--concurrency", "4", "--idle-interval", f"{idle}s",
                 "--schedule-check-seconds", f"{schedules}s")
    # At rest an idle worker holds one server connection: its LISTEN connection,
    # which also carries its calls (the pool's start-up connections are closed
    # after 10 s unused).
    wait_for(lambda: _worker_connections(admin, name) == (1, 1), timeout=90,
             message="the idle worker down to one server connection")
    before = _transactions(admin, name)
    started = time.monotonic()
    time.sleep(WINDOW_SECONDS)  # the measurement window (nothing is awaited here)
    sent = _transactions(admin, name) - before
    window = time.monotonic() - started
    bound = _bound(window, idle=idle, schedules=schedules)
    print(f"\nidle worker ({idle:g}s idle pace, schedules {schedules:g}s): {sent} "
          f"transactions in {window:.1f}s (bound {bound:.0f})")
    assert sent <= bound
    wait_for(lambda: _worker_connections(admin, name) == (1, 1), timeout=60,
             message="the idle worker at one server connection after the window")


def test_a_delayed_job_is_claimed_when_due_by_a_worker_polling_hourly(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    """The NOTIFY of a delayed enqueue finds nothing due; the claim that heard it
    asked when the next job comes due, so the fetch loop sleeps until then. With
    polls an hour apart, nothing else could claim it within the test's wait."""
    worker = start_worker(poll_interval=3600, idle_interval=3600)
    assert worker.listening.wait(TIMEOUT_SECONDS), "the worker never verified its LISTEN connection"
    wait_for(lambda: worker.claimer.empty_rounds >= 1, message="the start-up claim")
    job_id = client.enqueue(testjobs.Record, {"n": 1}, delay=2).id
    wait_for(lambda: client.job(job_id).status is jobwarden.JobStatus.COMPLETED, timeout=60,
             message="the delayed job completed")


def test_idle_polls_back_off_only_while_listen_is_verified(
        start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(poll_interval=0.05, idle_interval=0.8)
    assert worker.listening.wait(TIMEOUT_SECONDS)
    # Doubling per empty round up to the idle pace.
    wait_for(lambda: worker.claimer.idle_wait() == pytest.approx(0.8),
             message="the polls backed off to the idle pace")
    worker.claimer._unheard()  # as when the listener is lost: polling every 50 ms again
    assert worker.claimer.idle_wait() == pytest.approx(0.05)
