"""Fault injection with real worker processes: SIGKILL, SIGSTOP, many workers, lost database.

These are the guarantees of DESIGN section 12 that only a real process crash can prove:
every job reaches exactly one recorded outcome, an idempotent job is retried after a
crash, a non-idempotent one is never started twice, and a paused claimant that wakes up
after its claim was reaped cannot record anything.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable

import psycopg
import pytest

import jobwarden
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.ports import free_port
from tests.support.waiting import wait_for

Spawn = Callable[..., subprocess.Popen[bytes]]

pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_sigkill_mid_job_retries_an_idempotent_job_which_then_completes_once(
        client: jobwarden.Client, spawn_worker: Spawn, dsn: str) -> None:
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 1.0}).id
    victim = spawn_worker("--host", "victim")
    wait_for(lambda: audit_rows(dsn, "start"), timeout=120, message="the job to start")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    spawn_worker("--host", "survivor")
    wait_for(lambda: client.job(job_id).status is JobStatus.COMPLETED, timeout=120,
             message="the retried job to complete")
    record = client.job(job_id)
    assert record.attempts == 2
    assert record.claimed_by == "survivor"
    assert len(audit_rows(dsn, "start")) == 2
    assert len(audit_rows(dsn, "end")) == 1


def test_sigkill_mid_job_interrupts_a_non_idempotent_job_which_never_runs_again(
        client: jobwarden.Client, spawn_worker: Spawn, dsn: str) -> None:
    job_id = client.enqueue(testjobs.SleepyOnce, {"seconds": 1.0}).id
    victim = spawn_worker("--host", "victim")
    wait_for(lambda: audit_rows(dsn, "start"), timeout=120)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    spawn_worker("--host", "survivor")
    wait_for(lambda: client.job(job_id).status is JobStatus.INTERRUPTED, timeout=120,
             message="the job to be interrupted")
    # Several more reap and claim cycles of the survivor: the job stays where it is.
    marker = client.enqueue(testjobs.Record, delay=1.0).id
    wait_for(lambda: client.job(marker).status is JobStatus.COMPLETED, timeout=120)
    assert len(audit_rows(dsn, "start")) == 1
    assert audit_rows(dsn, "end") == []
    assert client.job(job_id).status is JobStatus.INTERRUPTED


def test_a_paused_claimant_resumed_after_its_reap_cannot_record_an_outcome(
        client: jobwarden.Client, spawn_worker: Spawn, dsn: str) -> None:
    port = free_port()
    # 3 s: the pause must land while the attempt still runs, however late the
    # loaded test process sends it after seeing the start row.
    job_id = client.enqueue(testjobs.SleepyThenCompleteInTx, {"seconds": 3.0}).id
    paused = spawn_worker("--host", "paused", "--http-port", str(port))
    wait_for(lambda: audit_rows(dsn, "start"), timeout=120)
    paused.send_signal(signal.SIGSTOP)
    try:
        spawn_worker("--host", "other")
        wait_for(lambda: client.job(job_id).status is JobStatus.COMPLETED, timeout=120,
                 message="the other worker to finish the reaped job")
    finally:
        paused.send_signal(signal.SIGCONT)
    fenced = ('jobwarden_jobs_fenced_total'
              '{job_class="tests.support.testjobs:SleepyThenCompleteInTx"')

    def fenced_counted() -> bool:
        status, body = _get(f"http://127.0.0.1:{port}/metrics")
        return status == 200 and any(
            line.startswith(fenced) and float(line.rsplit(" ", 1)[1]) >= 1
            for line in body.splitlines())

    wait_for(fenced_counted, timeout=120, message="the paused worker to count a fenced write")
    record = client.job(job_id)
    assert (record.status, record.claimed_by, record.attempts) == (JobStatus.COMPLETED,
                                                                  "other", 2)
    assert record.result == "slept"
    # Where the pause landed decides how the paused attempt ends: at its next
    # heartbeat (paused while sleeping) or at its fenced completion (paused while
    # an "alive" answer was on its way). Either way its effect never commits.
    assert [(attempt, event) for _id, attempt, _pid, event, _detail
            in audit_rows(dsn, "end")] == [(2, "end")]


def test_four_worker_processes_complete_every_job_exactly_once(
        client: jobwarden.Client, spawn_worker: Spawn, dsn: str) -> None:
    total = 8000
    for _batch in range(0, total, 2000):
        client.enqueue_many(testjobs.Counted, [None] * 2000)
    # A production-like grace: this test is about exactly-once in normal operation.
    # With the 1.5 s test grace, a worker starved of CPU for that long by the
    # parallel suite is (correctly) presumed dead and its jobs re-run elsewhere --
    # at-least-once, which the crash tests above cover on purpose.
    workers = [spawn_worker("--host", f"w{n}", "--concurrency", "4", "--heartbeat-grace", "30")
               for n in range(4)]
    wait_for(lambda: client.stats()["default"]["completed"] == total, timeout=180, interval=0.5,
             message=f"{total} jobs to complete")
    with psycopg.connect(dsn) as conn:
        per_job = conn.execute("SELECT count(*), count(DISTINCT job_id), "
                               "count(DISTINCT pid) FROM public.audit").fetchone()
        hosts = conn.execute("SELECT count(DISTINCT claimed_by) FROM jobwarden.jobs").fetchone()
    assert per_job == (total, total, 4)
    assert hosts == (4,)
    assert all(w.poll() is None for w in workers)


def test_terminated_connections_lose_no_job(client: jobwarden.Client, spawn_worker: Spawn,
                                            dsn: str) -> None:
    spawn_worker("--host", "w", "--concurrency", "2")
    first = [r.id for r in client.enqueue_many(testjobs.Counted, [None] * 50)]
    wait_for(lambda: all(client.job(i).status is JobStatus.COMPLETED for i in first), timeout=120)
    with psycopg.connect(dsn, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'jobwarden-worker:%%' "
            "AND pid <> pg_backend_pid()").fetchone()
    assert killed is not None and killed[0] >= 1
    second = [r.id for r in client.enqueue_many(testjobs.Counted, [None] * 50)]
    wait_for(lambda: all(client.job(i).status is JobStatus.COMPLETED for i in second),
             timeout=120, message="jobs after the connections were terminated")
    assert len(audit_rows(dsn, "ran")) == 100


@pytest.fixture
def own_server() -> object:
    from tests.support.postgres import EmbeddedServer

    server = EmbeddedServer()
    yield server
    server.close()


def test_the_worker_survives_a_database_restart(own_server: object, spawn_worker: Spawn,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.postgres import EmbeddedServer

    assert isinstance(own_server, EmbeddedServer)
    dsn = own_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(testjobs.AUDIT_DDL)
    with jobwarden.Client(dsn) as c:
        c.db.migrate()
    port = free_port()
    monkeypatch.setenv("JOBWARDEN_TEST_AUDIT_DSN", dsn)
    spawn_worker("--host", "w", "--http-port", str(port),
                 env={"JOBWARDEN_DSN": dsn, "JOBWARDEN_TEST_AUDIT_DSN": dsn})
    ready = f"http://127.0.0.1:{port}/readyz"
    wait_for(lambda: _get(ready)[0] == 200, timeout=120, message="ready")
    with jobwarden.Client(dsn) as c:
        before = [r.id for r in c.enqueue_many(testjobs.Counted, [None] * 20)]
        later = [r.id for r in c.enqueue_many(testjobs.Counted, [None] * 20, delay=2.0)]
    own_server.stop()
    wait_for(lambda: _get(ready)[0] == 503, timeout=120, message="not ready while down")
    assert json.loads(_get(ready)[1])["status"] == "database unavailable"
    own_server.start()
    wait_for(lambda: _get(ready)[0] == 200, timeout=120, message="ready again")
    with jobwarden.Client(dsn) as c:
        wait_for(lambda: all(c.job(i).status is JobStatus.COMPLETED for i in before + later),
                 timeout=120, message="every job to complete after the restart")
    with psycopg.connect(dsn) as conn:
        counts = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM public.audit "
                              "WHERE event = 'ran'").fetchone()
    assert counts == (40, 40)
