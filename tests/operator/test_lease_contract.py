"""What the operator relies on from the worker for ExclusiveJob resources.

An ExclusiveJob's job row names its lease (``jobs.lease_name``) because the
operator cannot import the job class; the worker must take that lease even when
the class itself is not exclusive. Strict xfail while the worker's guard derives
the lease from the class only: it turns into a failure (remove the mark) the day
the guard honours the row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from jobwarden.client import Client
from jobwarden.worker.worker import Worker
from tests.support.waiting import wait_for


@pytest.mark.xfail(strict=True, reason="the worker's lease guard ignores jobs.lease_name")
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
