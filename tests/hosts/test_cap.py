"""The per-host cap holds across every process and runner sharing a host name."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable

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
