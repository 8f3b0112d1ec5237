"""client.wait: the stored result or the job's error, woken by NOTIFY, typed timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import jobwarden
from jobwarden.api import operations
from jobwarden.db import plans
from jobwarden.db.database import Database
from jobwarden.worker.worker import Worker
from tests.support import testjobs


def test_wait_returns_the_stored_result(client: jobwarden.Client,
                                        start_worker: Callable[..., Worker]) -> None:
    start_worker(apps=["tests.support.testjobs"])
    enqueued = client.enqueue(testjobs.add, {"a": 1, "b": 2})
    assert client.wait(enqueued.id, timeout=30) == 3
    assert client.wait(enqueued.id, timeout=0) == 3  # a finished job answers at once


def test_wait_raises_the_jobs_error(client: jobwarden.Client,
                                    start_worker: Callable[..., Worker]) -> None:
    start_worker(apps=["tests.support.testjobs"])
    enqueued = client.enqueue(testjobs.Boom, None)
    with pytest.raises(jobwarden.JobFailed) as failed:
        client.wait(enqueued.id, timeout=60)
    assert failed.value.job_id == enqueued.id
    assert failed.value.status == "failed"
    assert "boom on attempt 3" in (failed.value.error or "")


def test_wait_on_a_cancelled_job_raises_with_its_status(client: jobwarden.Client) -> None:
    enqueued = client.enqueue(testjobs.Record, None)
    client.cancel(enqueued.id)
    with pytest.raises(jobwarden.JobFailed, match="cancelled"):
        client.wait(enqueued.id, timeout=5)


def test_wait_times_out_with_a_typed_error(client: jobwarden.Client) -> None:
    enqueued = client.enqueue(testjobs.Record, None)
    with pytest.raises(jobwarden.WaitTimeout) as timed_out:
        client.wait(enqueued.id, timeout=0.2)
    assert isinstance(timed_out.value, TimeoutError)
    assert timed_out.value.job_id == enqueued.id
    with pytest.raises(jobwarden.JobNotFound):
        client.wait(10**9, timeout=1)
    with pytest.raises(ValueError):
        client.wait(enqueued.id, timeout=-1)


def test_wait_is_woken_by_the_notification_not_by_its_poll(
        client: jobwarden.Client, db: Database) -> None:
    """With an hour-long poll, only the NOTIFY of the terminal write can end the wait."""
    enqueued = client.enqueue(testjobs.Record, None)
    sleeping = threading.Event()
    raised: list[BaseException] = []

    def observed(plan: plans.Plan[Any]) -> plans.Plan[Any]:
        reply: Any = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, plans.AwaitNotify):
                sleeping.set()  # the row was read (pending) and the wait is now blocked
            reply = yield step

    def waiter() -> None:
        try:
            plans.run(db, observed(operations.wait(enqueued.id, timeout=None, poll=3600)))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert sleeping.wait(10)
    client.cancel(enqueued.id)  # a terminal write: NOTIFYs the done topic on commit
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert [type(e) for e in raised] == [jobwarden.JobFailed]
