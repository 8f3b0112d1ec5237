"""Jobs the tests run, in-process and in real worker processes.

They record what they do into ``public.audit`` of the test database (DSN from
``JOBWARDEN_TEST_AUDIT_DSN``) with the database clock, so assertions about
"ran exactly once" or "never started twice" count rows, not log lines.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import psycopg

import jobwarden

AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS public.audit (
    id bigserial PRIMARY KEY,
    job_id bigint,
    attempt integer,
    pid integer,
    event text NOT NULL,
    detail text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def audit(job: jobwarden.Job | None, event: str, detail: str | None = None) -> None:
    dsn = os.environ["JOBWARDEN_TEST_AUDIT_DSN"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.audit (job_id, attempt, pid, event, detail) "
            "VALUES (%s, %s, %s, %s, %s)",
            (getattr(job, "job_id", None), getattr(job, "attempt", None), os.getpid(), event,
             detail),
        )


class Record(jobwarden.Job):
    """Records one 'ran' row and returns its data."""

    def perform(self, data: Any) -> Any:
        audit(self, "ran")
        return data


class LoadedModules(jobwarden.Job):
    """Records the name of every module its process has loaded when its code runs."""

    def perform(self, data: Any) -> None:
        audit(self, "modules", " ".join(sorted(sys.modules)))


class Noop(jobwarden.Job):
    def perform(self, data: Any) -> None:
        return None


def _sleep_with_heartbeats(job: jobwarden.Job, data: Any) -> None:
    """Record 'start', then sleep ``seconds`` in 50 ms steps, each followed by a heartbeat."""
    audit(job, "start")
    deadline = time.monotonic() + float(data.get("seconds", 1))
    while time.monotonic() < deadline:
        time.sleep(0.05)
        job.heartbeat()


class Sleepy(jobwarden.Job):
    """Sleeps ``seconds`` in small steps with heartbeats; records start and end."""

    timeout = 120

    def perform(self, data: Any) -> str:
        _sleep_with_heartbeats(self, data)
        audit(self, "end")
        return "slept"


class SleepyThenCompleteInTx(jobwarden.Job):
    """Sleeps like Sleepy, then writes its 'end' row in the transaction that completes it.

    ``Job.heartbeat()`` is a check, and a check can be stale by the time the code
    acts on it: a process paused right after an "alive" answer wakes up and runs
    on. The effect that must not happen after a reap is written the exactly-once
    way (``complete_in_transaction``): its row commits only if the claim is still
    this attempt's.
    """

    timeout = 120

    def perform(self, data: Any) -> str:
        _sleep_with_heartbeats(self, data)
        with psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"]) as conn, \
                conn.transaction():
            conn.execute("INSERT INTO public.audit (job_id, attempt, pid, event) "
                         "VALUES (%s, %s, %s, 'end')", (self.job_id, self.attempt, os.getpid()))
            self.complete_in_transaction(conn, "slept")
        return "slept"


class SleepyOnce(Sleepy):
    """A long job that must never run twice."""

    idempotent = False


class Boom(jobwarden.Job):
    max_retries = 2
    backoff_base = 0.01

    def perform(self, data: Any) -> None:
        audit(self, "boom")
        raise RuntimeError(f"boom on attempt {self.attempt}")


class SpinForever(jobwarden.Job):
    """Pure-Python busy loop: only a real interrupt stops it."""

    timeout = 0.5
    max_retries = 1
    backoff_base = 0.01

    def perform(self, data: Any) -> None:
        audit(self, "start")
        while True:
            pass


class BlockInC(jobwarden.Job):
    """Blocks in C (time.sleep): under process isolation the child is killed."""

    timeout = 3.0
    max_retries = 0

    def perform(self, data: Any) -> None:
        audit(self, "start")
        time.sleep(30)
        audit(self, "end")


class AsyncSlow(jobwarden.Job):
    timeout = 0.3
    max_retries = 0

    async def perform(self, data: Any) -> None:
        audit(self, "start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            audit(self, "cancelled")
            raise


class Hooked(jobwarden.Job):
    max_retries = 0

    def before_perform(self, data: Any) -> None:
        audit(self, "before")

    def perform(self, data: Any) -> Any:
        if data and data.get("fail"):
            raise ValueError("asked to fail")
        return {"ok": True}

    def after_perform(self, data: Any, result: Any) -> None:
        audit(self, "after")

    def on_success(self, result: Any) -> None:
        audit(self, "on_success", str(result))

    def on_failure(self, error: BaseException | str, *, is_final: bool) -> None:
        audit(self, "on_failure", f"final={is_final}")


class UntilCancelled(jobwarden.Job):
    def perform(self, data: Any) -> None:
        audit(self, "start")
        while True:
            time.sleep(0.05)
            try:
                self.heartbeat()
            except jobwarden.JobCancelled:
                audit(self, "cancelled")
                raise


class BigResult(jobwarden.Job):
    def perform(self, data: Any) -> str:
        return "x" * int(data["size"])


@jobwarden.job(max_retries=0)
def add(a: int, b: int) -> int:
    return a + b


@jobwarden.job(max_retries=0)
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def failure_hook(event: Any) -> None:
    audit(None, "app_failure_hook", f"{event.job_id}:{event.reason}:{event.is_final}")


_local = __import__("threading").local()


class Counted(jobwarden.Job):
    """Records one row per run on a per-thread connection (cheap enough for thousands)."""

    def perform(self, data: Any) -> None:
        conn = getattr(_local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"], autocommit=True)
            _local.conn = conn
        conn.execute("INSERT INTO public.audit (job_id, attempt, pid, event) "
                     "VALUES (%s, %s, %s, 'ran')", (self.job_id, self.attempt, os.getpid()))
