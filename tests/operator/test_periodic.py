"""The operator's periodic loops: one runner per database, gauges exported once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from jobwarden.api.client import Client
from jobwarden.controller import periodic
from jobwarden.controller.app import build_runtime
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.runtime import Runtime
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from jobwarden.observability import metrics
from tests.support.waiting import wait_for

#: The two-operator fixture's loop lease: long, so that a takeover well within it
#: can only come from the release, and the wait for it is a hang bound, not a speed.
TWO_LEASE_SECONDS = 120.0


def runtime(db: Database, pod: str) -> Runtime:
    return build_runtime(db, OperatorConfig(pod_name=pod, loop_lease_seconds=TWO_LEASE_SECONDS))


def test_a_loop_lease_has_one_holder_and_passes_on_release(db: Database) -> None:
    first = periodic.LoopLease(db, name="operator:test", owner="a", host="op-a", ttl=5)
    second = periodic.LoopLease(db, name="operator:test", owner="b", host="op-b", ttl=5)
    assert first.hold() and not second.hold()
    assert first.hold()  # renewal, same token
    token = first.token
    first.release()
    assert second.hold() and second.token is not None and token is not None
    assert second.token > token
    assert not first.hold()


def test_a_lapsed_holder_is_replaced_and_cannot_renew(db: Database) -> None:
    first = periodic.LoopLease(db, name="operator:test", owner="a", host="op-a", ttl=0.3)
    second = periodic.LoopLease(db, name="operator:test", owner="b", host="op-b", ttl=5)
    assert first.hold()
    wait_for(second.hold, timeout=60, message="the lapsed lease taken over")
    assert not first.hold() and first.token is None


@pytest.fixture
def two(db: Database, dsn: str) -> Iterator[tuple[periodic.Periodic, periodic.Periodic,
                                                   list[str]]]:
    other = Database(dsn, min_size=1, max_size=2)
    ran: list[str] = []
    lock = threading.Lock()

    def make(rt: Runtime) -> periodic.Periodic:
        def work() -> None:
            with lock:
                ran.append(rt.config.pod_name)
        return periodic.Periodic(rt, [periodic.Loop(name="test", interval=0.05, run=work)])

    a, b = make(runtime(db, "op-a")), make(runtime(other, "op-b"))
    yield a, b, ran
    a.stop()
    b.stop()
    other.close()


def test_of_two_operators_one_runs_the_loop_until_it_stops(
        two: tuple[periodic.Periodic, periodic.Periodic, list[str]]) -> None:
    a, b, ran = two
    a.start()
    wait_for(lambda: a.passes["test"] >= 1, message="a runs")
    b.start()
    wait_for(lambda: a.passes["test"] >= 10, message="ten passes of a")
    assert set(ran) == {"op-a"} and b.passes["test"] == 0
    a.stop()  # releases its lease: b takes over at its next pass, not after the lifetime
    wait_for(lambda: b.passes["test"] >= 3, timeout=TWO_LEASE_SECONDS / 2, message="b took over")
    assert ran[-1] == "op-b"


def test_gauges_are_set_by_the_holder_and_removed_by_a_standby(db: Database,
                                                              client: Client) -> None:
    client.enqueue("tests.support.testjobs:Noop", queue="reports", check=False)
    exported = gauges.DatabaseGauges(db)
    exported()
    sample = metrics.REGISTRY.get_sample_value
    assert sample("jobwarden_queue_depth", {"queue": "reports", "status": "pending"}) == 1
    assert sample("jobwarden_queue_depth", {"queue": "reports", "status": "failed"}) == 0
    assert sample("jobwarden_queue_oldest_pending_seconds", {"queue": "reports"}) >= 0
    client.enqueue("tests.support.testjobs:Noop", queue="later", delay=3600, check=False)
    exported()
    assert sample("jobwarden_queue_oldest_pending_seconds", {"queue": "later"}) == 0  # not due
    exported.clear()
    assert sample("jobwarden_queue_depth", {"queue": "reports", "status": "pending"}) is None


def test_the_reaper_loop_reclaims_a_stale_claim(db: Database, client: Client) -> None:
    job = client.enqueue("tests.support.testjobs:Noop", timeout=1, check=False)
    claimed = db.jobs.claim(host="gone", limit=1, grace_seconds=0.1)
    assert [c.id for c in claimed] == [job.id]
    wait_for(lambda: periodic.reap(db) or client.job(job.id).status != "processing",
             timeout=10, message="the stale claim reaped")
    assert client.job(job.id).status == "pending"
