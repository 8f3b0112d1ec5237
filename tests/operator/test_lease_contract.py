"""What the operator relies on from the worker for ExclusiveJob resources.

An ExclusiveJob's job row names its lease (``jobs.lease_name``) because the
operator cannot import the job class; the worker must take that lease even when
the class itself is not exclusive, with the resource's onBusy policy and ttl.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import psycopg

from jobwarden.api.client import Client
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support.waiting import wait_for


def test_a_job_row_that_names_a_busy_lease_is_deferred(
        client: Client, start_worker: Callable[..., Worker]) -> None:
    holder = client.lease("key:operator-contract", ttl=30, owner="elsewhere").acquire()
    spec = client.spec("tests.support.testjobs:Noop", {}, check=False)
    job_id = client.enqueue_specs([dataclasses.replace(
        spec, lease_name="key:operator-contract")])[0].id
    start_worker()
    wait_for(lambda: client.job(job_id).status == "completed"
             or client.job(job_id).deferrals > 0, timeout=10, message="claimed")
    try:
        assert client.job(job_id).deferrals > 0
        assert client.job(job_id).status == "pending"
    finally:
        holder.release()


def test_a_job_row_that_names_a_busy_lease_with_skip_is_not_run(
        client: Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    holder = client.lease("key:operator-skip", ttl=30, owner="elsewhere").acquire()
    spec = client.spec("tests.support.testjobs:Record", {}, check=False)
    job_id = client.enqueue_specs([dataclasses.replace(
        spec, lease_name="key:operator-skip", on_busy="skip", lease_ttl_seconds=120)])[0].id
    start_worker()
    try:
        wait_for(lambda: client.job(job_id).status.terminal, timeout=10, message="skipped")
        record = client.job(job_id)
        assert record.status == "cancelled"
        assert "skipped" in (record.last_error or "")
        assert audit_rows(dsn, "ran") == []
    finally:
        holder.release()


def test_the_row_lease_lives_for_its_ttl(client: Client, start_worker: Callable[..., Worker],
                                         dsn: str) -> None:
    spec = client.spec("tests.support.testjobs:Sleepy", {"seconds": 2}, check=False)
    job_id = client.enqueue_specs([dataclasses.replace(
        spec, lease_name="key:ttl-check", lease_ttl_seconds=600)])[0].id
    start_worker()
    wait_for(lambda: audit_rows(dsn, "start"), timeout=10, message="the job to start")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM expires_at - now()) FROM jobwarden.leases "
                           "WHERE name = 'key:ttl-check' AND owner IS NOT NULL").fetchone()
    assert row is not None  # held while the job runs
    assert 500 < float(row[0]) <= 600  # the row's ttl, not timeout + max(60, timeout) = 240
    wait_for(lambda: client.job(job_id).status.terminal, timeout=20)
    assert client.job(job_id).status == "completed"
