"""An enqueue's durability under a server crash, on a private server (issue 16).

A single enqueue on a pooled connection commits asynchronously, so its row is
visible (and its NOTIFY delivered) before its WAL flush, and only then waits
for the flush (``job_insert_one_visible`` then ``flush_barrier``): a worker
claims the job while the enqueue's durable commit is still in progress. What
must hold: an enqueue that returned is durable, and a non-idempotent job that a
worker claimed cannot vanish in a crash (its claim's durable commit flushes the
insert before it).

As in ``test_claim_durability.py``, the WAL writer is stopped (SIGSTOP) and the
server SIGKILLed, and nothing else writes WAL, so an asynchronous commit is
still only in shared memory when the server dies. The control case shows that
the visible insert alone is such a commit (lost by the crash), so the enqueue
cases passing means the flush barrier made them durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.db.jobs import insert_one_params
from jobwarden.structs.states import JobStatus
from tests.support import testjobs
from tests.support.postgres import EmbeddedServer, quiet_wal_server, walwriter_pid
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    with quiet_wal_server() as own:
        yield own


def _then_crash(server: EmbeddedServer, write: Callable[[], int]) -> int:
    """Run ``write`` (it returns a job id) with the WAL writer stopped, then SIGKILL
    the server and start it again (crash recovery replays what reached the disk)."""
    walwriter = walwriter_pid(server.dsn)
    os.kill(walwriter, signal.SIGSTOP)
    try:
        job_id = write()
        server.crash()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(walwriter, signal.SIGKILL)
    server.start()
    return job_id


def _status(server: EmbeddedServer, job_id: int) -> JobStatus | None:
    with Database(server.dsn, min_size=1, max_size=1) as db:
        record = db.jobs.get(job_id)
    return None if record is None else record.status


@pytest.mark.parametrize("lost_statement", [False, True])
def test_a_job_whose_enqueue_returned_survives_a_crash(server: EmbeddedServer,
                                                       lost_statement: bool) -> None:
    with jobwarden.Client(server.dsn, max_connections=1) as client:
        client.enqueue(testjobs.Record, {"warm": True})  # connected before the WAL stops
        if lost_statement:  # the plain-text path a pooler's other server connection takes
            with client.db.connection() as conn:
                conn.execute("DEALLOCATE ALL")

        job_id = _then_crash(server, lambda: client.enqueue(testjobs.Record, {"n": 1}).id)
        assert client.db.connections.prepared_misses == int(lost_statement)
    assert _status(server, job_id) is JobStatus.PENDING


def test_a_job_whose_async_enqueue_returned_survives_a_crash(server: EmbeddedServer) -> None:
    job_id = _then_crash(server, lambda: asyncio.run(_enqueue_once(server.dsn)))
    assert _status(server, job_id) is JobStatus.PENDING


async def _enqueue_once(dsn: str) -> int:
    async with jobwarden.AsyncClient(dsn) as client:
        return (await client.enqueue(testjobs.Record, {"n": 2})).id


def _visible_insert(db: Database, *, idempotent: bool, queue: str = "default") -> int:
    """The enqueue's first statement alone (no flush barrier after it)."""
    spec = jobwarden.Client(database=db).spec(testjobs.Record, {"n": 3}, queue=queue,
                                              idempotent=idempotent)
    found = db.rows("job_insert_one_visible",
                    insert_one_params(spec, channel=db.jobs.channel))
    return int(found[0][0])


def test_the_visible_insert_alone_is_not_durable_control(server: EmbeddedServer) -> None:
    with Database(server.dsn, min_size=1, max_size=1) as db:
        db.jobs.get(0)  # connected before the WAL stops
        job_id = _then_crash(server, lambda: _visible_insert(db, idempotent=True))
    # It committed without waiting for its flush: a worker could act on it at once,
    # and the crash forgot it (no enqueue call returned it, so nothing was promised).
    assert _status(server, job_id) is None


def test_a_claimed_non_idempotent_job_survives_a_crash_before_its_enqueue_flushed(
        server: EmbeddedServer) -> None:
    with Database(server.dsn, min_size=1, max_size=1) as db:
        db.hosts.register(host="h", pool="default", code_version="", cap=None,
                          worker_id=uuid.uuid4(), pid=os.getpid(), concurrency=1,
                          queues=["claim-crash"])
        # Prepared before the WAL writer stops: the claim below is one message.
        db.jobs.claim(host="h", limit=5, grace_seconds=0.5, queues=["nothing-here"],
                      host_cap=True)

        def insert_and_claim() -> int:
            job_id = _visible_insert(db, idempotent=False, queue="claim-crash")
            claimed = db.jobs.claim(host="h", limit=5, grace_seconds=0.5,
                                    queues=["claim-crash"], host_cap=True)
            assert [c.id for c in claimed] == [job_id]
            return job_id

        job_id = _then_crash(server, insert_and_claim)
    # The job may have started: its durable claim flushed the insert before it.
    assert _status(server, job_id) is JobStatus.PROCESSING


def test_where_the_role_may_not_emit_the_barrier_an_enqueue_waits_for_the_wal_writer(
        server: EmbeddedServer) -> None:
    # A managed server may revoke EXECUTE on pg_logical_emit_message from PUBLIC. The
    # enqueue's row has committed by then: an error would make its caller enqueue it
    # again, so the barrier waits for the WAL writer's own flush instead.
    with jobwarden.Client(server.dsn, max_connections=1) as owner:
        owner.enqueue(testjobs.Record, {"warm": True})  # the schema is there
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS jw_plain")
        admin.execute("CREATE ROLE jw_plain LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA jobwarden TO jw_plain")
        admin.execute("GRANT ALL ON ALL TABLES IN SCHEMA jobwarden TO jw_plain")
        admin.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA jobwarden TO jw_plain")
        admin.execute(f"REVOKE EXECUTE ON FUNCTION {_emit(admin)} FROM PUBLIC")
    plain = psycopg.conninfo.make_conninfo(server.dsn, user="jw_plain")
    try:
        with jobwarden.Client(plain, max_connections=1) as client, \
                psycopg.connect(server.dsn, autocommit=True) as admin:
            client.enqueue(testjobs.Record, {"warm": True})  # connected, statements ready
            done: dict[str, object] = {}

            def enqueue() -> None:
                try:
                    done["id"] = client.enqueue(testjobs.Record, {"n": "plain"}).id
                except BaseException as exc:  # shown by the assertion below
                    done["error"] = exc

            walwriter = walwriter_pid(server.dsn)
            os.kill(walwriter, signal.SIGSTOP)
            thread = threading.Thread(target=enqueue)
            try:
                thread.start()
                visible = wait_for(
                    lambda: admin.execute(
                        "SELECT id FROM jobwarden.jobs WHERE data->>'n' = 'plain'").fetchone(),
                    message="the enqueued row to be visible")
                # Nothing flushes the WAL while its writer is stopped: the row is
                # visible, and the call has not returned.
                assert thread.is_alive(), done
            finally:
                os.kill(walwriter, signal.SIGCONT)
            thread.join(30)
            assert done == {"id": visible[0]}
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute(f"GRANT EXECUTE ON FUNCTION {_emit(admin)} TO PUBLIC")
            admin.execute("DROP OWNED BY jw_plain")
            admin.execute("DROP ROLE jw_plain")


def _emit(admin: psycopg.Connection[Any]) -> str:
    """pg_logical_emit_message's signature on this server (17 added an argument)."""
    row = admin.execute(
        "SELECT coalesce(to_regprocedure('pg_logical_emit_message(boolean, text, text,"
        " boolean)'), to_regprocedure('pg_logical_emit_message(boolean, text, text)'))::text"
    ).fetchone()
    assert row is not None
    return str(row[0])
