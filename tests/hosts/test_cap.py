"""The per-host cap holds across every process and runner sharing a host name."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from tests.support import hostjobs, testjobs
from tests.support.waiting import wait_for

COMPLETED = jobwarden.JobStatus.COMPLETED


@pytest.mark.slow
def test_the_cap_holds_with_three_worker_processes_sharing_one_host_name(
        client: jobwarden.Client, dsn: str,
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    for _ in range(3):
        spawn_worker("--host", "shared-host", "--concurrency", "3",
                     env={"JOBWARDEN_HOST_CAP": "2"})
    wait_for(lambda: [h.processes for h in client.hosts.status()] == [3], timeout=30,
             message="three processes registered on one host")
    assert client.hosts.status()[0].cap == 2
    ids = [client.enqueue(testjobs.Sleepy, {"seconds": 0.25}).id for _ in range(12)]

    most = 0
    deadline = time.monotonic() + 60
    while not all(client.job(i).status is COMPLETED for i in ids):
        assert time.monotonic() < deadline, "jobs did not finish"
        most = max(most, hostjobs.processing_on(dsn, "shared-host"))

    assert most == 2  # the cap was reached (so the test can fail) and never passed
    intervals = hostjobs.audit_intervals(dsn)
    assert len(intervals) == 12
    assert hostjobs.max_overlap([(start, end) for _, _, start, end in intervals]) <= 2
    assert len({pid for _, pid, _, _ in intervals}) >= 2  # the processes shared the work


def test_concurrent_capped_claims_never_pass_the_cap(client: jobwarden.Client,
                                                     db: Database) -> None:
    """Many claimants racing on one host: the row lock makes the count exact."""
    import threading

    db.hosts.register(host="race", pool="default", code_version="", cap=3,
                      worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(50)])
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def claimant() -> None:
        barrier.wait()
        got = db.jobs.claim(host="race", limit=2, grace_seconds=60, host_cap=True)
        with lock:
            claimed.extend(c.id for c in got)

    threads = [threading.Thread(target=claimant) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(claimed) == 3
    assert client.hosts.status(host="race")[0].running == 3


def test_a_pool_cap_applies_unless_the_host_sets_its_own(client: jobwarden.Client,
                                                         db: Database) -> None:
    client.hosts.set_pool_cap("capped", 1)
    for host, cap in (("pool-default", None), ("own-cap", 4)):
        db.hosts.register(host=host, pool="capped", code_version="", cap=cap,
                          worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(20)])

    assert len(db.jobs.claim(host="pool-default", limit=10, grace_seconds=60,
                             host_cap=True)) == 1
    assert len(db.jobs.claim(host="own-cap", limit=10, grace_seconds=60, host_cap=True)) == 4
    assert {h.name: h.cap for h in client.hosts.status()} == {"own-cap": 4, "pool-default": 1}


def _claim_in_flight(db: Database, dsn: str, host: str) -> psycopg.Connection[Any]:
    """A sibling process's claim between its host lock and its commit (held open)."""
    conn = psycopg.connect(dsn)
    conn.execute(db.sql("host_claim_lock"), {"host": host})
    return conn


def _waiting_on_a_lock(dsn: str, *, query_part: str = "", event: str | None = None) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s AND (%s::text IS NULL OR wait_event = %s::text)",
            (f"%{query_part}%", event, event)).fetchone()
    return bool(found and found[0])


def _in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    return thread, done


def test_processes_of_an_uncapped_host_claim_side_by_side(client: jobwarden.Client,
                                                          db: Database, dsn: str) -> None:
    """No cap, nothing to count: a sibling's claim in flight does not hold this one up
    (the host row is taken FOR SHARE; bench.growth saw 8 processes take turns)."""
    db.hosts.register(host="wide", pool="default", code_version="", cap=None,
                      worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(4)])
    sibling = _claim_in_flight(db, dsn, "wide")
    try:
        thread, done = _in_thread(lambda: db.jobs.claim(host="wide", limit=2, grace_seconds=60,
                                                         host_cap=True))
        thread.join(timeout=60)  # a claim queued behind the sibling would wait forever
        assert not thread.is_alive() and len(done[0]) == 2  # type: ignore[arg-type]
    finally:
        sibling.close()


def test_a_capped_hosts_claims_queue_behind_a_siblings_claim(client: jobwarden.Client,
                                                              db: Database, dsn: str) -> None:
    db.hosts.register(host="narrow", pool="default", code_version="", cap=2,
                      worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(4)])
    sibling = _claim_in_flight(db, dsn, "narrow")
    try:
        thread, done = _in_thread(lambda: db.jobs.claim(host="narrow", limit=2,
                                                         grace_seconds=60, host_cap=True))
        wait_for(lambda: _waiting_on_a_lock(dsn, event="advisory"), timeout=30,
                 message="the claim queued on the host's cap lock")
        assert not done
        sibling.commit()
        thread.join(timeout=60)
        assert len(done[0]) == 2  # type: ignore[arg-type]
    finally:
        sibling.close()


def test_a_drain_waits_for_a_claim_in_flight_and_later_claims_see_it(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    """The drain's UPDATE of the host row conflicts with a claim's FOR SHARE: either
    the claim commits first (and the drain sees its jobs running) or it sees the
    drain and claims nothing."""
    db.hosts.register(host="leaving", pool="default", code_version="", cap=None,
                      worker_id=uuid.uuid4(), pid=1, concurrency=8, queues=())
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(4)])
    sibling = _claim_in_flight(db, dsn, "leaving")
    try:
        thread, done = _in_thread(lambda: db.hosts.drain(host="leaving", reason="test",
                                                          expires_in=60))
        wait_for(lambda: _waiting_on_a_lock(dsn, query_part="draining"), timeout=30,
                 message="the drain waited for the claim in flight")
        assert not done
        sibling.commit()
        thread.join(timeout=60)
        assert done == [["leaving"]]
    finally:
        sibling.close()
    assert db.jobs.claim(host="leaving", limit=2, grace_seconds=60, host_cap=True) == []
