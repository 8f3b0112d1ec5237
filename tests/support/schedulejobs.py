"""Jobs and code-defined schedules for the schedule tests, plus a runner-process entry point.

Importing this module registers two code schedules (``code-nightly`` with the
decorator, ``code-cleanup`` through a module-level ``schedules`` list), which is
what a worker started with ``--app tests.support.schedulejobs`` syncs.
"""

from __future__ import annotations

import time
from typing import Any

import jobwarden
from jobwarden.schedules import registry
from tests.support.testjobs import audit


@registry.schedule("code-nightly", cron="0 3 * * *", timezone="Europe/Berlin",
                   data={"report": "nightly"})
class Nightly(jobwarden.Job):
    queue = "reports"
    timeout = 900
    max_retries = 1

    def perform(self, data: Any) -> Any:
        audit(self, "nightly")
        return data


class Cleanup(jobwarden.Job):
    def perform(self, data: Any) -> None:
        audit(self, "cleanup")


schedules = [registry.define("code-cleanup", job=Cleanup, interval="15m")]


class Tick(jobwarden.Job):
    """Records one 'tick' row per run (the slot is in the job's unique key)."""

    def perform(self, data: Any) -> None:
        audit(self, "tick")


class RunUntilCancelled(jobwarden.Job):
    """Heartbeats until asked to stop (JobCancelled), at most ``seconds``; audits both ends."""

    timeout = 60

    def perform(self, data: Any) -> str:
        audit(self, "start")
        deadline = time.monotonic() + float((data or {}).get("seconds", 20))
        try:
            while time.monotonic() < deadline:
                time.sleep(0.05)
                self.heartbeat()
        except jobwarden.JobCancelled:
            audit(self, "stopped")
            raise
        audit(self, "end")
        return "done"


def run_runner(dsn: str, seconds: float, barrier: Any, results: Any) -> None:
    """One runner process for the concurrency test: loop enqueue_due on the real clock.

    Waits on ``barrier`` so every process starts at once, then passes repeatedly
    for ``seconds`` and puts its summed report (as a dict) on ``results``.
    """
    from jobwarden.db.database import Database
    from jobwarden.schedules import runner
    from jobwarden.structs.schedules import RunReport

    total = RunReport()
    with Database(dsn, min_size=1, max_size=2) as db:
        db.now()  # connect before the start line
        barrier.wait(timeout=60)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            total.add(runner.enqueue_due(db))
            time.sleep(0.005)  # pacing only: 8 processes share 2 cores
    results.put(total.as_json())
