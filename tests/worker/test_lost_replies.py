"""Writes whose commit happened but whose reply was lost (issue #12, defects 3 and 5).

The fault: the statement runs and commits in the real database, then the call
raises ``DatabaseUnavailable`` as a dropped connection does ("server closed the
connection unexpectedly"). The worker must learn the truth from the database:
a lost claim reply is resolved by asking which rows carry the claim's tokens
(the jobs run, promptly, once), and a retried outcome write that finds its own
effect already there is a success, not a fence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jobwarden
from jobwarden import errors
from jobwarden.observability import metrics
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import wait_for


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def _reply_lost_once(table: Any, method: str, *, when: Callable[[Any], bool],
                     injected: threading.Event | None = None) -> threading.Event:
    """Patch ``table.method``: the first call whose result matches ``when`` commits, then
    raises as a lost reply would. Returns an event set when the fault was injected (pass
    one to share it between methods: the fault is injected once in all)."""
    real = getattr(table, method)
    injected = injected or threading.Event()

    def call(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not injected.is_set() and when(result):
            injected.set()
            raise errors.DatabaseUnavailable(
                "database unavailable: server closed the connection unexpectedly")
        return result

    setattr(table, method, call)
    return injected


def test_a_claim_whose_reply_was_lost_runs_its_jobs_once(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    # heartbeat_grace 60: without recovery the jobs would sit claimed until reaped.
    worker = start_worker(concurrency=4, heartbeat_grace=60.0)
    # An idle worker claims through claim_idle (it returns the claims and the next due
    # time): whichever claim takes the jobs loses its reply.
    injected = _reply_lost_once(worker.db.jobs, "claim", when=bool)
    _reply_lost_once(worker.db.jobs, "claim_idle", when=lambda r: bool(r[0]),
                     injected=injected)
    ids = [r.id for r in client.enqueue_many(testjobs.Record, [None] * 3, idempotent=False)]
    # A deadline for a loaded machine (a fresh clone's CI missed 15 s once), not a speed.
    assert injected.wait(60), "no claim took the jobs"
    wait_for(lambda: all(client.job(i).status is JobStatus.COMPLETED for i in ids),
             timeout=20, message="the jobs of the lost claim to complete")
    ran = sorted(r[0] for r in audit_rows(dsn, "ran"))
    assert ran == sorted(ids)  # each ran exactly once
    assert all(client.job(i).attempts == 1 for i in ids)


def test_a_completion_retried_after_its_reply_was_lost_is_not_a_fence(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    labels = {"queue": "default", "job_class": "tests.support.testjobs:Record"}
    fenced = _sample("jobwarden_jobs_fenced_total", **labels, operation="complete")
    completed = _sample("jobwarden_jobs_completed_total", **labels)
    worker = start_worker()
    injected = _reply_lost_once(worker.db.jobs, "complete_many", when=bool)
    job_id = client.enqueue(testjobs.Record).id
    assert injected.wait(15)
    assert worker.recorder.idle(timeout=15)
    assert client.job(job_id).status is JobStatus.COMPLETED
    assert _sample("jobwarden_jobs_fenced_total", **labels, operation="complete") == fenced
    assert _sample("jobwarden_jobs_completed_total", **labels) == completed + 1


def test_a_failure_retried_after_its_reply_was_lost_is_not_a_fence(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    labels = {"queue": "default", "job_class": "tests.support.testjobs:Boom"}
    fenced = _sample("jobwarden_jobs_fenced_total", **labels, operation="fail")
    worker = start_worker()
    injected = _reply_lost_once(worker.db.jobs, "fail", when=lambda status: status is not None)
    job_id = client.enqueue(testjobs.Boom, max_retries=0).id
    assert injected.wait(15)
    assert worker.recorder.idle(timeout=15)
    assert client.job(job_id).status is JobStatus.FAILED
    assert _sample("jobwarden_jobs_fenced_total", **labels, operation="fail") == fenced
