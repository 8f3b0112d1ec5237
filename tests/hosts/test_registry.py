"""The host registry: register, refresh, deregister, prune."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.worker.worker import Worker
from tests.support import hostjobs, testjobs
from tests.support.waiting import wait_for


def test_a_worker_registers_its_host_and_process_and_leaves_on_clean_exit(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(host="reg-host", pool="blue", code_version="v42", concurrency=3)
    [host] = wait_for(lambda: client.hosts.status(host="reg-host"), message="registered")
    assert (host.pool, host.code_version, host.processes, host.slots) == ("blue", "v42", 1, 3)
    assert host.state == "active" and not host.draining and host.cap is None

    worker.stop(timeout=5)

    assert client.hosts.status(host="reg-host") == []


def test_processes_sharing_a_host_name_share_one_host_row(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    first = start_worker(host="shared")
    start_worker(host="shared")
    wait_for(lambda: [h.processes for h in client.hosts.status()] == [2],
             message="two processes on one host")

    first.stop(timeout=5)

    [host] = client.hosts.status()
    assert host.processes == 1 and not host.draining


def test_the_host_is_refreshed_while_alive(client: jobwarden.Client, dsn: str,
                                           start_worker: Callable[..., Worker]) -> None:
    start_worker(host="fresh")
    wait_for(lambda: client.hosts.status(host="fresh"), message="registered")
    hostjobs.set_last_seen(dsn, host="fresh", seconds_ago=3600)

    # A live process's own prune pass may delete the row that now looks an hour stale
    # before its refresh runs; the refresh then registers the host again. Either way
    # the host must come back seen just now; an absent row is "not yet", not an error.
    wait_for(lambda: [h for h in client.hosts.status(host="fresh") if h.seen_seconds_ago < 60],
             message="the next refresh")


def test_stale_hosts_are_pruned_and_their_jobs_left_to_the_reaper(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    db.hosts.register(host="gone", pool="default", code_version="", cap=None,
                      worker_id=uuid.uuid4(), pid=1, concurrency=1, queues=())
    job_id = client.enqueue(testjobs.Record).id
    [claim] = db.jobs.claim(host="gone", limit=1, grace_seconds=600, host_cap=True)
    hostjobs.set_last_seen(dsn, host="gone", seconds_ago=3600)

    assert db.hosts.prune(stale_seconds=300) == (1, 1)

    assert client.hosts.status() == []
    record = client.job(job_id)
    assert claim.id == job_id
    assert record.status is jobwarden.JobStatus.PROCESSING and record.claimed_by == "gone"


def test_a_recently_seen_host_is_not_pruned(db: Database) -> None:
    db.hosts.register(host="alive", pool="default", code_version="", cap=None,
                      worker_id=uuid.uuid4(), pid=1, concurrency=1, queues=())
    assert db.hosts.prune(stale_seconds=300) == (0, 0)
    assert db.hosts.names() == ["alive"]


def test_an_admin_drain_outlives_a_restart_and_a_shutdown_drain_does_not(
        client: jobwarden.Client, db: Database) -> None:
    def restart(host: str) -> bool:
        process = uuid.uuid4()
        db.hosts.register(host=host, pool="default", code_version="", cap=None,
                          worker_id=process, pid=1, concurrency=1, queues=())
        drained = db.hosts.status(host=host)[0].draining
        db.hosts.deregister(host=host, worker_id=process)
        return drained

    process = uuid.uuid4()
    db.hosts.register(host="admin-drained", pool="default", code_version="", cap=None,
                      worker_id=process, pid=1, concurrency=1, queues=())
    assert client.hosts.drain(host="admin-drained", expires_in=0) == ["admin-drained"]
    assert db.hosts.deregister(host="admin-drained", worker_id=process) is False
    assert restart("admin-drained") is True

    process = uuid.uuid4()
    db.hosts.register(host="self-drained", pool="default", code_version="", cap=None,
                      worker_id=process, pid=1, concurrency=1, queues=())
    assert db.hosts.stop_worker(host="self-drained", worker_id=process, grace_seconds=60,
                                stale_seconds=300)
    assert db.hosts.status(host="self-drained")[0].drain_reason == "shutdown"
    assert restart("self-drained") is False


def test_a_stopping_process_does_not_drain_its_working_siblings(db: Database) -> None:
    stopping, sibling = uuid.uuid4(), uuid.uuid4()
    for process in (stopping, sibling):
        db.hosts.register(host="pod", pool="default", code_version="", cap=None,
                          worker_id=process, pid=1, concurrency=1, queues=())

    assert not db.hosts.stop_worker(host="pod", worker_id=stopping, grace_seconds=60,
                                    stale_seconds=300)
    [host] = db.hosts.status(host="pod")
    assert not host.draining and host.stopping_processes == 1

    assert db.hosts.stop_worker(host="pod", worker_id=sibling, grace_seconds=60,
                                stale_seconds=300)
    assert db.hosts.status(host="pod")[0].draining


def test_an_unregistered_host_claims_nothing_under_the_registry(
        client: jobwarden.Client, db: Database) -> None:
    client.enqueue(testjobs.Record)
    assert db.jobs.claim(host="nobody", limit=5, grace_seconds=60, host_cap=True) == []
    assert len(db.jobs.claim(host="nobody", limit=5, grace_seconds=60)) == 1


@pytest.mark.parametrize("write", ["refresh", "stop_worker"])
def test_a_process_write_waits_for_a_registration_of_its_process_instead_of_deadlocking(
        db: Database, dsn: str, write: str) -> None:
    """The claim gate re-registers a pruned process while its refresh task refreshes it
    (or while it stops).

    Registration locks the hosts row, then the workers row; refresh and stop must
    take them in the same order. Explicit steps on two connections: the
    registration holds the host row, the other write blocks on it, then the
    registration writes the process row. With the other write locking the process
    row first, that write waited for it and the server aborted one of them
    (deadlock detected).
    """
    worker_id = uuid.uuid4()
    params: dict[str, object] = {
        "host": "twice", "pool": "default", "version": "", "cap": None,
        "worker": worker_id, "pid": 1, "concurrency": 1, "queues": [], "release": "0.2.0",
        "schema_needs": 20}
    db.hosts.register(host="twice", pool="default", code_version="", cap=None,
                      worker_id=worker_id, pid=1, concurrency=1, queues=())
    refreshed: list[object] = []

    def refresh() -> None:
        try:
            if write == "refresh":
                refreshed.append(db.hosts.refresh(host="twice", worker_id=worker_id))
            else:
                db.hosts.stop_worker(host="twice", worker_id=worker_id, grace_seconds=60,
                                     stale_seconds=60)
                refreshed.append(True)
        except Exception as exc:  # reported by the assertion below
            refreshed.append(exc)

    with psycopg.connect(dsn) as registration, psycopg.connect(dsn, autocommit=True) as watch:
        registration.execute(db.sql("host_upsert"), params)  # the host row is locked
        holder = registration.info.backend_pid
        thread = threading.Thread(target=refresh)
        thread.start()
        wait_for(lambda: watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (holder,)).fetchone() == (1,), message="the refresh waits for the host row")
        registration.execute(db.sql("worker_insert"), params)
        registration.commit()
        thread.join(timeout=30)

    assert len(refreshed) == 1 and refreshed[0] is not None
    assert not isinstance(refreshed[0], Exception), refreshed[0]


def test_the_migration_a_worker_records_needing_is_the_newest_the_migrations_ship() -> None:
    """The host record reads the migration files' names (not db/migrations: an idle
    worker does not load it, tests/worker/test_idle_worker.py); both say the same."""
    from jobwarden.db import hosts, migrations

    assert hosts.schema_needs() == migrations.newest_known() == migrations.available()[-1].version
