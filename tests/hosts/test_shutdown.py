"""SIGTERM drains the worker itself: no new claims, running jobs finish, nothing is lost."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

import pytest

import jobwarden
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import wait_for

JobStatus = jobwarden.JobStatus

pytestmark = pytest.mark.slow


def test_sigterm_stops_claiming_and_lets_the_running_job_finish(
        client: jobwarden.Client, dsn: str,
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    proc = spawn_worker("--host", "term-host", "--shutdown-grace", "15", "--concurrency", "2")
    long_id = client.enqueue(testjobs.Sleepy, {"seconds": 1.5}).id
    wait_for(lambda: audit_rows(dsn, "start"), timeout=20, message="the long job to start")

    proc.send_signal(signal.SIGTERM)
    [host] = wait_for(lambda: [h for h in client.hosts.status(host="term-host")
                               if h.stopping_processes == 1], message="the self-drain")
    assert host.draining and host.drain_reason == "shutdown" and host.running == 1
    later = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(3)]

    assert proc.wait(timeout=30) == 0
    long_job = client.job(long_id)
    assert long_job.status is JobStatus.COMPLETED and long_job.attempts == 1
    assert [r[0] for r in audit_rows(dsn, "end")] == [long_id]
    for job_id in later:
        record = client.job(job_id)
        assert (record.status, record.attempts, record.claimed_by) == (JobStatus.PENDING, 0, None)
    assert client.hosts.status(host="term-host") == []  # deregistered on its way out


def test_a_job_still_running_after_the_grace_period_is_left_for_the_reaper(
        client: jobwarden.Client, dsn: str, start_worker: Callable[..., Worker],
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    proc = spawn_worker("--host", "short-grace", "--shutdown-grace", "0.3")
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 2.0}).id
    wait_for(lambda: audit_rows(dsn, "start"), timeout=20, message="the job to start")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    left = client.job(job_id)
    assert left.status is JobStatus.PROCESSING and left.claimed_by == "short-grace"

    start_worker(host="rescuer")
    wait_for(lambda: client.job(job_id).status is JobStatus.COMPLETED, timeout=20,
             message="the reaped job to run again and complete")
    record = client.job(job_id)
    assert record.attempts == 2 and record.claimed_by == "rescuer"
    assert len(audit_rows(dsn, "start")) == 2 and len(audit_rows(dsn, "end")) == 1


def test_a_second_process_on_the_host_keeps_working_while_one_stops(
        client: jobwarden.Client, dsn: str,
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    stopping = spawn_worker("--host", "pod", "--shutdown-grace", "15")
    spawn_worker("--host", "pod")
    wait_for(lambda: [h.processes for h in client.hosts.status(host="pod")] == [2],
             timeout=20, message="two processes on the host")

    stopping.send_signal(signal.SIGTERM)
    assert stopping.wait(timeout=30) == 0
    ids = [client.enqueue(testjobs.Record, {"n": n}).id for n in range(5)]
    wait_for(lambda: all(client.job(i).status is JobStatus.COMPLETED for i in ids),
             timeout=20, message="the sibling to run the jobs")

    [host] = client.hosts.status(host="pod")
    assert host.processes == 1 and not host.draining
