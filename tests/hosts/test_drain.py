"""Drain and resume: a draining host starts nothing new, others keep working."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobwarden
from jobwarden.observability import metrics
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import wait_for

COMPLETED = jobwarden.JobStatus.COMPLETED


def _registered(client: jobwarden.Client, *hosts: str) -> None:
    wait_for(lambda: set(hosts) <= set(client.hosts.names()), message=f"{hosts} registered")


def _all_completed(client: jobwarden.Client, ids: list[int], timeout: float = 15.0) -> None:
    wait_for(lambda: all(client.job(i).status is COMPLETED for i in ids), timeout=timeout,
             message=f"jobs {ids} completed")


def test_a_drained_host_claims_nothing_while_another_keeps_working(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    start_worker(host="host-a")
    start_worker(host="host-b")
    _registered(client, "host-a", "host-b")

    assert client.hosts.drain(host="host-a", reason="deploy") == ["host-a"]
    ids = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(20)]
    _all_completed(client, ids)

    assert {client.job(i).claimed_by for i in ids} == {"host-b"}
    [a] = client.hosts.status(host="host-a")
    assert a.draining and a.drain_reason == "deploy" and a.running == 0


def test_resume_restores_a_drained_host(client: jobwarden.Client,
                                        start_worker: Callable[..., Worker]) -> None:
    start_worker(host="host-a")
    start_worker(host="host-b")
    _registered(client, "host-a", "host-b")
    client.hosts.drain(host="host-a")
    client.hosts.drain(host="host-b")

    assert client.hosts.resume(host="host-a") == ["host-a"]
    ids = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(10)]
    _all_completed(client, ids)

    assert {client.job(i).claimed_by for i in ids} == {"host-a"}
    assert not client.hosts.status(host="host-a")[0].draining


def test_an_expired_drain_lifts_by_itself(client: jobwarden.Client,
                                          start_worker: Callable[..., Worker]) -> None:
    start_worker(host="host-a")
    _registered(client, "host-a")
    client.hosts.drain(host="host-a", expires_in=1.0)
    [drained] = client.hosts.status(host="host-a")
    assert drained.draining and drained.drain_expires_at is not None

    job_id = client.enqueue(testjobs.Record).id
    _all_completed(client, [job_id])

    claimed_at = client.job(job_id).claimed_at
    assert claimed_at is not None and claimed_at >= drained.drain_expires_at
    assert not client.hosts.status(host="host-a")[0].draining


def test_a_drain_with_no_expiry_lasts_until_resumed(client: jobwarden.Client,
                                                    start_worker: Callable[..., Worker]) -> None:
    start_worker(host="host-a")
    _registered(client, "host-a")
    client.hosts.drain(host="host-a", expires_in=0)
    [host] = client.hosts.status(host="host-a")
    assert host.draining and host.drain_expires_at is None


def test_a_pool_drain_also_applies_to_hosts_that_join_the_pool_later(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    start_worker(host="blue-1", pool="blue")
    _registered(client, "blue-1")
    assert client.hosts.drain(pool="blue") == ["blue-1"]
    start_worker(host="blue-2", pool="blue")
    start_worker(host="green-1", pool="green")
    _registered(client, "blue-2", "green-1")

    ids = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(10)]
    _all_completed(client, ids)

    assert {client.job(i).claimed_by for i in ids} == {"green-1"}
    assert [h.draining for h in client.hosts.status(pool="blue")] == [True, True]
    assert client.hosts.resume(pool="blue") == ["blue-1", "blue-2"]
    assert not any(h.draining for h in client.hosts.status(pool="blue"))


def test_a_draining_host_finishes_what_it_runs(client: jobwarden.Client,
                                               start_worker: Callable[..., Worker],
                                               dsn: str) -> None:
    start_worker(host="host-a")
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 0.8}).id
    wait_for(lambda: audit_rows(dsn, "start"), message="the job to start")

    client.hosts.drain(host="host-a")
    assert client.hosts.running(["host-a"]) == {"host-a": 1}
    assert client.hosts.wait_idle(["host-a"], timeout=10, interval=0.05)

    record = client.job(job_id)
    assert record.status is COMPLETED and record.attempts == 1
    assert [r[0] for r in audit_rows(dsn, "end")] == [job_id]


def test_drain_metrics_show_the_draining_host_and_the_drain_duration(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    pool = "metrics-pool"
    before = metrics.REGISTRY.get_sample_value(
        "jobwarden_drain_duration_seconds_count", {"pool": pool}) or 0.0
    start_worker(host="metrics-host", pool=pool)
    client.enqueue(testjobs.Sleepy, {"seconds": 0.5})
    wait_for(lambda: audit_rows(dsn, "start"), message="the job to start")

    client.hosts.drain(host="metrics-host")
    wait_for(lambda: metrics.REGISTRY.get_sample_value(
        "jobwarden_host_draining", {"pool": pool}) == 1.0, message="draining gauge")
    wait_for(lambda: (metrics.REGISTRY.get_sample_value(
        "jobwarden_drain_duration_seconds_count", {"pool": pool}) or 0.0) == before + 1,
        message="one drain duration observed")
    total = metrics.REGISTRY.get_sample_value("jobwarden_drain_duration_seconds_sum",
                                              {"pool": pool})
    assert total is not None and total > 0
    client.hosts.resume(host="metrics-host")
    wait_for(lambda: metrics.REGISTRY.get_sample_value(
        "jobwarden_host_draining", {"pool": pool}) == 0.0, message="gauge back to 0")


def test_host_counts_per_pool_and_state(client: jobwarden.Client,
                                        start_worker: Callable[..., Worker]) -> None:
    start_worker(host="c-1", pool="p")
    start_worker(host="c-2", pool="p")
    _registered(client, "c-1", "c-2")
    client.hosts.drain(host="c-2")
    counts = {(c.pool, c.state): c.count for c in client.hosts.counts()}
    assert counts == {("p", "active"): 1, ("p", "draining"): 1}


@pytest.mark.parametrize("kwargs", [{}, {"host": "a", "pool": "b"}, {"host": " "},
                                    {"host": "a", "expires_in": -1},
                                    {"host": "a", "reason": "x" * 500}])
def test_bad_drain_requests_are_refused_and_change_nothing(
        client: jobwarden.Client, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        client.hosts.drain(**kwargs)  # type: ignore[arg-type]
    assert client.hosts.status() == []
