"""A worker runs enqueued jobs and records exactly one fenced outcome per attempt."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobwarden
from jobwarden.structs.jobs import JobSpec
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import wait_for


def test_a_job_runs_once_and_its_result_is_stored(client: jobwarden.Client,
                                                  start_worker: Callable[..., Worker],
                                                  dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record, {"n": 1}).id
    start_worker()
    done = wait_for(lambda: client.job(job_id).status is jobwarden.JobStatus.COMPLETED or None,
                    message="job completed")
    assert done
    record = client.job(job_id)
    assert record.result == {"n": 1}
    assert record.attempts == 1
    assert [r[0] for r in audit_rows(dsn, "ran")] == [job_id]


def test_function_jobs_take_their_data_as_arguments(client: jobwarden.Client,
                                                    start_worker: Callable[..., Worker]) -> None:
    sync_id = client.enqueue(testjobs.add, {"a": 2, "b": 3}).id
    async_id = client.enqueue(testjobs.async_add, [4, 5]).id
    start_worker()
    wait_for(lambda: client.job(async_id).status.terminal and client.job(sync_id).status.terminal)
    assert client.job(sync_id).result == 5
    assert client.job(async_id).result == 9


def test_function_job_with_unusable_data_fails_without_retry(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    with pytest.raises(jobwarden.InvalidJobData):  # refused at enqueue where the code imports
        client.enqueue(testjobs.add, "not an object")
    # ...but data enqueued elsewhere (the CLI, another service) can still be unusable.
    job_id = client.enqueue_specs([JobSpec(job_class=testjobs.add.path(), data="not an object",
                                           max_retries=3)])[0].id
    start_worker()
    wait_for(lambda: client.job(job_id).status.terminal)
    record = client.job(job_id)
    assert record.status is jobwarden.JobStatus.FAILED
    assert record.attempts == 1
    assert "takes an object" in (record.last_error or "")
