"""A claim's durability under a server crash, on a private server (issue 16).

Claims of idempotent jobs commit asynchronously (they do not wait for their WAL
flush); a claim that holds a non-idempotent job is durable before the worker
sees it. The difference only shows when the server crashes between the claim's
commit and the WAL writer's next flush, so the test makes that window as wide
as it needs: the WAL writer is stopped (SIGSTOP) before the claim, and the
whole server is SIGKILLed after it. Nothing else writes WAL on the private
server meanwhile (autovacuum and the background writer are off), so an
asynchronous commit record is still only in shared memory when the server dies.

The idempotent case is the control: it shows that the setup really loses what
was not flushed, so the non-idempotent case passing means the claim was
durable, not that the crash happened to be gentle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from jobwarden.db.database import Database
from jobwarden.structs.jobs import JobSpec
from jobwarden.structs.states import JobStatus
from tests.support.postgres import EmbeddedServer, quiet_wal_server, walwriter_pid

pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    with quiet_wal_server() as own:
        yield own


def _claim_then_crash(server: EmbeddedServer, *, idempotent: bool,
                      capped: bool) -> tuple[int, object]:
    """Enqueue one job, claim it with the WAL writer stopped, SIGKILL the server.

    ``capped``: the claim every worker makes (the host registry's: one message of
    BEGIN, host lock, prepared claim, COMMIT), else the plain one-statement claim.
    Returns the job id and the claim token the claimant was given.
    """
    with Database(server.dsn, min_size=1, max_size=1) as db:
        queue = _queue(idempotent, capped)  # each test its own queue on the shared server
        job = db.jobs.insert_many([JobSpec(job_class="tests.support.testjobs:Counted",
                                           queue=queue, idempotent=idempotent)])[0]
        if capped:
            db.hosts.register(host="h", pool="default", code_version="", cap=None,
                              worker_id=uuid.uuid4(), pid=os.getpid(), concurrency=1,
                              queues=[queue])
            # Prepared before the WAL writer stops: the claim below is one message.
            db.jobs.claim(host="h", limit=5, grace_seconds=0.5, queues=["nothing-here"],
                          host_cap=True)
        walwriter = walwriter_pid(server.dsn)
        os.kill(walwriter, signal.SIGSTOP)
        try:
            claimed = db.jobs.claim(host="h", limit=5, grace_seconds=0.5, queues=[queue],
                                    host_cap=capped)
            assert [c.id for c in claimed] == [job.id]
            server.crash()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(walwriter, signal.SIGKILL)
    server.start()  # crash recovery replays what reached the disk
    return job.id, claimed[0].claim_token


def _queue(idempotent: bool, capped: bool) -> str:
    return f"idempotent-{idempotent}-capped-{capped}"


@pytest.mark.parametrize("capped", [False, True])
def test_a_claimed_non_idempotent_job_stays_claimed_across_a_crash_and_never_runs_twice(
        server: EmbeddedServer, capped: bool) -> None:
    job_id, token = _claim_then_crash(server, idempotent=False, capped=capped)
    queue = _queue(False, capped)
    with Database(server.dsn, min_size=1, max_size=1) as db:
        record = db.jobs.get(job_id)
        assert record is not None
        assert record.status is JobStatus.PROCESSING
        assert record.attempts == 1
        # The job may have started before the crash: nobody may claim it again.
        assert db.jobs.claim(host="other", limit=5, grace_seconds=30,
                             queues=[queue]) == []
        # Its claimant is gone (no heartbeat): the reaper ends it as interrupted.
        deadline = time.monotonic() + 30
        while not db.jobs.reap():
            assert time.monotonic() < deadline, "the crashed claim was never reaped"
            time.sleep(0.1)
        record = db.jobs.get(job_id)
        assert record is not None and record.status is JobStatus.INTERRUPTED
        assert db.jobs.claim(host="other", limit=5, grace_seconds=30,
                             queues=[queue]) == []
        with psycopg.connect(server.dsn) as conn:
            row = conn.execute("SELECT claim_token FROM jobwarden.jobs WHERE id = %s",
                               (job_id,)).fetchone()
        assert row is not None and row[0] == token


@pytest.mark.parametrize("capped", [False, True])
def test_a_claimed_idempotent_job_may_be_forgotten_by_a_crash_and_runs_again(
        server: EmbeddedServer, capped: bool) -> None:
    job_id, _token = _claim_then_crash(server, idempotent=True, capped=capped)
    with Database(server.dsn, min_size=1, max_size=1) as db:
        record = db.jobs.get(job_id)
        assert record is not None
        # The control: the asynchronous claim had not reached the disk.
        assert record.status is JobStatus.PENDING
        assert record.attempts == 0
        again = db.jobs.claim(host="other", limit=5, grace_seconds=30,
                              queues=[_queue(True, capped)])
        assert [c.id for c in again] == [job_id]  # at least once: it runs again
