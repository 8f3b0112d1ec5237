"""Retries, hard timeouts, hooks, cancellation, results and errors, in a live worker."""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg

import jobwarden
from jobwarden.observability import metrics
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import TIMEOUT_SECONDS, wait_for


def _finished(client: jobwarden.Client, job_id: int,
              timeout: float = TIMEOUT_SECONDS) -> jobwarden.JobStatus:
    wait_for(lambda: client.job(job_id).status.terminal, timeout=timeout,
             message=f"job {job_id} to finish")
    return client.job(job_id).status


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_failures_are_retried_until_retries_run_out(client: jobwarden.Client,
                                                    start_worker: Callable[..., Worker],
                                                    dsn: str) -> None:
    before = _sample("jobwarden_jobs_failed_total", queue="default",
                     job_class="tests.support.testjobs:Boom", reason="error")
    job_id = client.enqueue(testjobs.Boom).id
    start_worker()
    assert _finished(client, job_id) is JobStatus.FAILED
    record = client.job(job_id)
    assert record.attempts == 3  # max_retries = 2
    assert "RuntimeError: boom on attempt 3" in (record.last_error or "")
    assert [r[1] for r in audit_rows(dsn, "boom")] == [1, 2, 3]
    assert _sample("jobwarden_jobs_failed_total", queue="default",
                   job_class="tests.support.testjobs:Boom", reason="error") == before + 1


def test_a_sync_job_past_its_timeout_is_stopped_and_retried(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(testjobs.SpinForever).id
    start_worker(concurrency=1, prefetch=0)
    assert _finished(client, job_id) is JobStatus.FAILED
    record = client.job(job_id)
    assert record.attempts == 2
    assert "passed its 0.5s timeout" in (record.last_error or "")
    # The busy loop really stopped: the single slot is free for the next job.
    follow_up = client.enqueue(testjobs.Record, {"after": "spin"}).id
    assert _finished(client, follow_up) is JobStatus.COMPLETED


def test_an_async_job_past_its_timeout_is_cancelled(client: jobwarden.Client,
                                                    start_worker: Callable[..., Worker],
                                                    dsn: str) -> None:
    job_id = client.enqueue(testjobs.AsyncSlow).id
    start_worker()
    assert _finished(client, job_id) is JobStatus.FAILED
    assert "timeout" in (client.job(job_id).last_error or "")
    wait_for(lambda: audit_rows(dsn, "cancelled"), message="the coroutine to be cancelled")


def test_process_isolation_kills_a_job_blocked_in_c(client: jobwarden.Client,
                                                    start_worker: Callable[..., Worker],
                                                    dsn: str) -> None:
    job_id = client.enqueue(testjobs.BlockInC).id
    worker = start_worker(concurrency=1, prefetch=0, isolation="process",
                          apps=("tests.support.testjobs",))
    assert _finished(client, job_id, timeout=30) is JobStatus.FAILED
    assert "timeout" in (client.job(job_id).last_error or "")
    [start] = audit_rows(dsn, "start")
    follow_up = client.enqueue(testjobs.Record).id
    assert _finished(client, follow_up, timeout=30) is JobStatus.COMPLETED
    [ran] = audit_rows(dsn, "ran")
    assert ran[2] != start[2]  # a fresh child process replaced the killed one
    assert audit_rows(dsn, "end") == []
    assert worker.readiness() == (True, "ready")


def test_hooks_run_in_order_and_never_change_the_outcome(client: jobwarden.Client,
                                                         start_worker: Callable[..., Worker],
                                                         dsn: str) -> None:
    ok = client.enqueue(testjobs.Hooked, {}).id
    bad = client.enqueue(testjobs.Hooked, {"fail": True}).id
    start_worker(failure_hook="tests.support.testjobs:failure_hook")
    assert _finished(client, ok) is JobStatus.COMPLETED
    assert _finished(client, bad) is JobStatus.FAILED
    wait_for(lambda: len(audit_rows(dsn)) >= 6, message="all hooks")
    by_job: dict[int | None, list[str]] = {}
    for job_id, _attempt, _pid, event, _detail in audit_rows(dsn):
        by_job.setdefault(job_id, []).append(event)
    assert by_job[ok] == ["before", "after", "on_success"]
    assert by_job[bad] == ["before", "on_failure"]
    assert [r[4] for r in audit_rows(dsn, "on_failure")] == ["final=True"]
    assert [r[4] for r in audit_rows(dsn, "app_failure_hook")] == [f"{bad}:error:True"]


def test_cancelling_a_running_job_stops_it_at_its_next_heartbeat(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(testjobs.UntilCancelled).id
    start_worker()
    wait_for(lambda: audit_rows(dsn, "start"))
    assert client.cancel(job_id) is JobStatus.PROCESSING
    assert _finished(client, job_id) is JobStatus.CANCELLED
    assert audit_rows(dsn, "cancelled")


def test_a_cancelled_pending_job_never_runs(client: jobwarden.Client,
                                            start_worker: Callable[..., Worker],
                                            dsn: str) -> None:
    job_id = client.enqueue(testjobs.Record, delay=0.3).id
    client.cancel(job_id)
    marker = client.enqueue(testjobs.Record, delay=0.4).id
    start_worker()
    assert _finished(client, marker) is JobStatus.COMPLETED
    assert [r[0] for r in audit_rows(dsn, "ran")] == [marker]


def test_large_results_are_stored_truncated_with_a_marker(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    small = client.enqueue(testjobs.BigResult, {"size": 10}).id
    big = client.enqueue(testjobs.BigResult, {"size": 5000}).id
    start_worker(result_max_bytes=1000)
    assert _finished(client, big) is JobStatus.COMPLETED
    assert _finished(client, small) is JobStatus.COMPLETED
    assert client.job(small).result == "x" * 10
    stored = client.job(big).result
    assert stored["jobwarden_truncated"] is True
    assert stored["original_bytes"] == 5002
    assert len(stored["preview"]) == 1000


def test_an_unknown_job_fails_its_attempt_and_the_worker_carries_on(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    unknown = client.enqueue("tests.support.testjobs:Missing", max_retries=0, check=False).id
    good = client.enqueue(testjobs.Record).id
    start_worker()
    assert _finished(client, unknown) is JobStatus.FAILED
    assert "has no 'Missing'" in (client.job(unknown).last_error or "")
    assert _finished(client, good) is JobStatus.COMPLETED


def test_a_reaped_claim_raises_job_fenced_inside_perform_and_its_outcome_is_not_recorded(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    labels = {"queue": "default", "job_class": "tests.support.testjobs:Sleepy"}
    before = _sample("jobwarden_jobs_fenced_total", **labels, operation="fail")
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 30}).id
    start_worker()
    wait_for(lambda: audit_rows(dsn, "start"))
    with psycopg.connect(dsn, autocommit=True) as conn:  # another worker took it over
        conn.execute("UPDATE jobwarden.jobs SET claim_token = gen_random_uuid(), "
                     "claimed_by = 'other' WHERE id = %s", (job_id,))
    wait_for(lambda: _sample("jobwarden_jobs_fenced_total", **labels, operation="fail")
             > before, message="the fenced outcome to be counted")
    record = client.job(job_id)
    assert record.status is JobStatus.PROCESSING and record.claimed_by == "other"
    assert audit_rows(dsn, "end") == []


def test_an_idle_worker_starts_a_new_job_on_notify_not_on_its_poll(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    # A poll far longer than any loaded machine takes to run a job on its NOTIFY: the
    # bound below tells the two paths apart without being a speed claim.
    worker = start_worker(poll_interval=600)
    wait_for(lambda: worker.readiness()[0], message="worker ready")
    assert worker.listening.wait(TIMEOUT_SECONDS), "the worker never started listening"
    started = time.monotonic()
    job_id = client.enqueue(testjobs.Record).id
    assert _finished(client, job_id, timeout=300) is JobStatus.COMPLETED
    assert time.monotonic() - started < 300  # half the poll: it was the NOTIFY


class _SleepCounter(threading.Event):
    """The fetch loop's wake event, counting its sleeps on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0
        self.sleeping = False

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        self.sleeping = True
        try:
            return super().wait(timeout)
        finally:
            self.sleeping = False

    def asleep_since(self, waits: int) -> bool:
        """Asleep on the event (not about to wake), having gone to sleep more than
        ``waits`` times in all."""
        return self.sleeping and not self.is_set() and self.waits > waits


def test_a_notified_job_is_claimed_by_the_listen_thread_itself(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    """No hand-off to the fetch thread between hearing of a job and claiming it
    (issue 16: each hand-off is a scheduler wake-up on the enqueue-to-start path)."""
    worker = start_worker(poll_interval=3600)
    assert worker.listening.wait(TIMEOUT_SECONDS), "the worker never started listening"
    claimed_on: dict[int, str] = {}
    claim, claim_idle = worker.db.jobs.claim, worker.db.jobs.claim_idle

    def recording_claim(**kwargs: Any) -> list[ClaimedJob]:
        found = claim(**kwargs)
        for job in found:
            claimed_on[job.id] = threading.current_thread().name
        return found

    def recording_claim_idle(**kwargs: Any) -> tuple[list[ClaimedJob], float | None]:
        found, due = claim_idle(**kwargs)  # after a round that found nothing (issue 31)
        for job in found:
            claimed_on[job.id] = threading.current_thread().name
        return found, due

    worker.db.jobs.claim = recording_claim  # type: ignore[method-assign]
    worker.db.jobs.claim_idle = recording_claim_idle  # type: ignore[method-assign]
    sleeps = _SleepCounter()
    previous, worker.claimer.wake_event = worker.claimer.wake_event, sleeps
    previous.set()  # the fetch loop may be asleep on the old event: move it to the new one
    jobs: list[int] = []
    for _ in range(3):
        # The fetch loop asleep (after its start-up claim): only the listen thread
        # can claim the next job.
        wait_for(functools.partial(sleeps.asleep_since, 0), message="the fetch loop asleep")
        jobs.append(client.enqueue(testjobs.Record).id)
        assert _finished(client, jobs[-1]) is JobStatus.COMPLETED
    assert claimed_on == {job_id: "jobwarden-listen" for job_id in jobs}
    # A host without a cap: an outcome's write does not wake the fetch loop for a
    # claim round that could find nothing the NOTIFYs did not bring.
    assert sleeps.waits == 1


def test_the_worker_serves_metrics_and_probes(client: jobwarden.Client,
                                              start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(http_port=0, http_host="127.0.0.1")
    assert worker.http is not None
    base = f"http://127.0.0.1:{worker.http.port}"
    job_id = client.enqueue(testjobs.Record).id
    _finished(client, job_id)
    body = urllib.request.urlopen(f"{base}/metrics").read().decode()
    for name in ("jobwarden_jobs_completed_total", "jobwarden_job_duration_seconds_bucket",
                 "jobwarden_job_queue_wait_seconds_bucket", "jobwarden_db_up"):
        assert name in body
    wait_for(lambda: worker.readiness()[0])
    ready = json.loads(urllib.request.urlopen(f"{base}/readyz").read())
    assert ready == {"ok": True, "status": "ready"}
    assert json.loads(urllib.request.urlopen(f"{base}/healthz").read())["ok"] is True
