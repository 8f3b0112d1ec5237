"""A Forbid schedule whose worker was SIGKILLed mid-run is free again within the
heartbeat grace, not after the lease window (issue #12, defect 6).

The schedule fires every second with a 15 s job timeout, so its lease window is
75 s (timeout + max(60, timeout)). Before the fix the next runs were enqueued
and dropped as lease-busy for that whole window; now the reaper releases the
lease with the claim and the next slot's job runs. The time from the kill to
the next run is printed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import pytest

import jobwarden
from jobwarden.extensions.exclusive import lease_window
from tests.conftest import audit_rows
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

Spawn = Callable[..., subprocess.Popen[bytes]]


def test_a_killed_forbid_runs_lease_is_freed_with_its_reaped_claim(
        client: jobwarden.Client, spawn_worker: Spawn, dsn: str) -> None:
    client.schedules.upsert("forbid-crash", interval="1s", overlap="Forbid",
                            job_class="tests.support.schedulejobs:RunUntilCancelled",
                            data={"seconds": 12}, timeout_seconds=15, idempotent=False)
    args = ("--app", "tests.support.schedulejobs", "--schedule-check-seconds", "0.2")
    victim = spawn_worker("--host", "victim", *args)
    first = wait_for(lambda: audit_rows(dsn, "start"), timeout=30, message="a first run")[0][0]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed = time.monotonic()
    spawn_worker("--host", "survivor", *args)

    def next_run() -> list[int]:
        return [r[0] for r in audit_rows(dsn, "start") if r[0] != first]

    window = lease_window(15)
    later = wait_for(next_run, timeout=window - 15, message="a run after the reaped one")
    elapsed = time.monotonic() - killed
    print(f"\nForbid schedule: next run {elapsed:.1f}s after the SIGKILL "
          f"(heartbeat grace 1.5s; lease window {window:.0f}s)")
    # Not idempotent: the killed run was interrupted (not retried under the lease).
    assert client.job(first).status is jobwarden.JobStatus.INTERRUPTED
    assert later and elapsed < window
