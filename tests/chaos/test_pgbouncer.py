"""Everything through a real PgBouncer in transaction mode (issue #12).

PgBouncer 1.18 (Debian's) cannot carry server-side prepared statements: a
statement psycopg prepared on one server connection is missing on the next
transaction's (``prepared statement "_pg3_1" does not exist``). Jobwarden
prepares nothing unless ``JOBWARDEN_PREPARED_STATEMENTS`` asks, so workers,
client, leases, schedules and the reaper all run through it; LISTEN cannot be
carried either, so wake-ups fall back to polling. The same no-loss checks as
everywhere else hold.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import jobwarden
from jobwarden import errors
from jobwarden.assembly import build_worker
from jobwarden.db.database import PREPARED_STATEMENTS_ENV, Database
from jobwarden.settings import WorkerSettings
from jobwarden.structs.states import JobStatus
from tests.conftest import FAST, audit_rows
from tests.support import testjobs
from tests.support.pgbouncer import PgBouncer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def bouncer(dsn: str) -> Iterator[PgBouncer]:
    running = PgBouncer(dsn, pool_size=6)
    yield running
    print(f"----- pgbouncer.log\n{running.log()[-1500:]}")
    running.close()


def _hammer(db: Database, threads: int = 4, calls: int = 60) -> list[str]:
    """Run the same named queries from several threads at once; the errors seen."""
    seen: list[str] = []

    def run() -> None:
        for _ in range(calls):
            try:
                with db.transaction() as conn:  # holds a server connection: others get another
                    db.rows("db_now", conn=conn)
                    db.rows("db_now", conn=conn)
            except errors.JobwardenError as exc:
                seen.append(str(exc))
            except psycopg.Error as exc:
                seen.append(str(exc))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    return seen


def test_prepared_statements_are_off_by_default_and_would_break_pgbouncer_1_18(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fewer server connections than clients: transactions hop between them.
    bouncer = PgBouncer(dsn, pool_size=2)
    try:
        monkeypatch.delenv(PREPARED_STATEMENTS_ENV, raising=False)
        with Database(bouncer.dsn, min_size=4, max_size=4) as db:
            assert _hammer(db) == []
        # The control: with preparing on, the failure the issue reported is real here.
        monkeypatch.setenv(PREPARED_STATEMENTS_ENV, "0")
        with Database(bouncer.dsn, min_size=4, max_size=4) as db:
            seen = _hammer(db)
        assert any("_pg3_" in e for e in seen), seen[:3]
    finally:
        bouncer.close()


def test_lease_pairs_prepared_by_text_through_pgbouncer_1_18(dsn: str) -> None:
    """The lease calls are protocol-level prepared statements named by their text
    (db/calls.py): through a pooler that hops between fewer server connections than
    clients they must never fail, never run another statement, and stay fenced."""
    bouncer = PgBouncer(dsn, pool_size=2)
    try:
        with Database(bouncer.dsn, min_size=4, max_size=4) as db:
            client = jobwarden.Client(database=db)
            seen: list[str] = []
            tokens: dict[int, list[int]] = {}

            def pairs(n: int) -> None:
                mine = tokens.setdefault(n, [])
                try:
                    for _ in range(40):
                        with client.lease(f"bounced-{n}", ttl=30) as lease:
                            mine.append(lease.token)
                        assert lease.released and not lease.lost
                        # Fencing through the pooler: a stale token frees nothing.
                        assert db.leases.release(name=f"bounced-{n}", owner=lease.owner,
                                                 token=lease.token) is False
                except Exception as exc:  # every failure is reported below
                    seen.append(f"{type(exc).__name__}: {exc}")

            threads = [threading.Thread(target=pairs, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert seen == []
            for n, mine in tokens.items():
                assert len(mine) == 40 and mine == sorted(set(mine))  # strictly increasing
                assert db.leases.read(f"bounced-{n}")[0].owner is None
            print(f"\nlease pairs through pgbouncer 1.18: {db.connections.prepared_misses} "
                  "prepared statements missed on a hopped-to server connection")
    finally:
        bouncer.close()


def test_a_bad_prepared_statements_setting_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch, dsn: str) -> None:
    monkeypatch.setenv(PREPARED_STATEMENTS_ENV, "sometimes")
    with pytest.raises(errors.ConfigurationError, match=PREPARED_STATEMENTS_ENV):
        Database(dsn)


def test_workers_client_leases_schedules_and_reaper_through_pgbouncer(
        bouncer: PgBouncer, spawn_worker: Spawn, dsn: str) -> None:
    through = bouncer.dsn
    env = {"JOBWARDEN_DSN": through}
    started = time.monotonic()
    with jobwarden.Client(through) as client:
        client.schedules.upsert("bounced", interval="1s",
                                job_class="tests.support.schedulejobs:Tick")
        victim = spawn_worker("--host", "victim", "--concurrency", "1",
                              "--app", "tests.support.schedulejobs",
                              "--schedule-check-seconds", "0.5", env=env)
        # The victim takes the one long non-idempotent job, then dies running it.
        doomed = client.enqueue(testjobs.SleepyOnce, {"seconds": 60}).id
        wait_for(lambda: audit_rows(dsn, "start"), timeout=30, message="the long job to start")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        for n in range(2):
            spawn_worker("--host", f"bounced-{n}", "--concurrency", "4",
                         "--app", "tests.support.schedulejobs,tests.support.leasejobs",
                         "--schedule-check-seconds", "0.5", env=env)
        counted = [r.id for r in client.enqueue_many(testjobs.Counted, [None] * 300)]
        once = [r.id for r in client.enqueue_many(testjobs.Record, [None] * 20,
                                                  idempotent=False)]
        exclusive = [r.id for r in client.enqueue_many("tests.support.leasejobs:ExclusiveRecord",
                                                       [None] * 10)]
        every = counted + once + exclusive

        # A lease held through the pooler, and a waiter woken without LISTEN.
        holder = client.lease("bounced-lease", ttl=30).acquire()
        got: dict[str, float] = {}

        def wait_for_lease() -> None:
            lease = client.lease("bounced-lease", ttl=30, wait=20).try_acquire()
            if lease is not None:
                got["after"] = time.monotonic() - released_at
                lease.release()

        waiter = threading.Thread(target=wait_for_lease)
        waiter.start()
        wait_for(lambda: client.db.leases.read("bounced-lease")[0].owner == holder.owner,
                 message="the lease held")
        released_at = time.monotonic()
        assert holder.release() is True
        waiter.join(30)
        assert "after" in got, "the waiter never got the released lease"

        wait_for(lambda: all(client.job(i).status.terminal for i in every), timeout=90,
                 message="every job through the pooler to finish")
        wait_for(lambda: client.job(doomed).status.terminal, timeout=30,
                 message="the killed worker's job to be reaped")
        wait_for(lambda: len(audit_rows(dsn, "tick")) >= 2, timeout=30,
                 message="two schedule ticks")
        statuses = {i: client.job(i).status for i in every}
        doomed_status = client.job(doomed).status
    ran = [r[0] for r in audit_rows(dsn, "ran")]
    starts = [r[0] for r in audit_rows(dsn, "start")]
    lost = [i for i, s in statuses.items() if s is not JobStatus.COMPLETED]
    doubled = sorted({i for i in ran if ran.count(i) > 1})
    print(f"\npgbouncer 1.18 transaction mode: {len(every) + 1} jobs, 1 worker SIGKILL, "
          f"lease waiter woke {got['after']:.2f}s after the release, "
          f"{time.monotonic() - started:.1f}s; lost={len(lost)} doubled={len(doubled)}")
    assert lost == [] and doubled == []
    assert sorted(set(ran)) == sorted(every)
    assert doomed_status is JobStatus.INTERRUPTED and starts.count(doomed) == 1
    assert os.environ.get(PREPARED_STATEMENTS_ENV) is None


def _completed(client: jobwarden.Client, job_id: int) -> bool:
    return client.job(job_id).status is JobStatus.COMPLETED


def test_behind_pgbouncer_listen_hears_nothing_so_the_worker_keeps_polling(
        bouncer: PgBouncer, dsn: str) -> None:
    """LISTEN through a transaction-mode pooler is accepted and hears nothing: the
    probe NOTIFY never comes back, so the worker never slows its polls (issue 31)."""
    db = Database(bouncer.dsn, min_size=0, max_size=4)
    options: dict[str, Any] = {**FAST, "host": "bounced", "idle_interval": 30.0}
    worker = build_worker(db, WorkerSettings(**options))
    worker.start()
    try:
        wait_for(lambda: worker.claimer.unheard_probes >= 1, timeout=60,
                 message="the LISTEN probe given up")
        assert not worker.listening.is_set()
        assert worker.claimer.idle_wait() == FAST["poll_interval"]
        with jobwarden.Client(bouncer.dsn) as client:
            job_id = client.enqueue(testjobs.Record, {"n": 1}).id
            wait_for(lambda: client.job(job_id).status is JobStatus.COMPLETED, timeout=30,
                     message="the job claimed by polling")
    finally:
        worker.stop(timeout=5)
        db.close()


def test_a_direct_listen_dsn_keeps_wake_ups_behind_pgbouncer(
        bouncer: PgBouncer, dsn: str) -> None:
    """Every call through the pooler, LISTEN on a direct connection: with polls an
    hour apart, only a NOTIFY can have the enqueued job claimed (issue 31)."""
    db = Database(bouncer.dsn, min_size=0, max_size=4, listen_dsn=dsn)
    options: dict[str, Any] = {**FAST, "poll_interval": 3600.0, "host": "bounced-listen"}
    worker = build_worker(db, WorkerSettings(**options))
    worker.start()
    try:
        assert worker.listening.wait(30), "the direct LISTEN connection never verified"
        wait_for(lambda: worker.claimer.empty_rounds >= 1, message="the start-up claim")
        with jobwarden.Client(bouncer.dsn) as client:
            for n in range(3):
                job_id = client.enqueue(testjobs.Record, {"n": n}).id
                wait_for(functools.partial(_completed, client, job_id), timeout=30,
                         message="the job claimed on its NOTIFY")
    finally:
        worker.stop(timeout=5)
        db.close()
