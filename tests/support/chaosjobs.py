"""Jobs for the database fault scenarios: they record each start in a local file.

The database is what the scenarios break, so the record of "this job started"
must not depend on it: each start appends one line (``<job id> <attempt>``) to
the file ``JOBWARDEN_TEST_RUNS_FILE`` names (O_APPEND: lines never interleave).
A job id on two lines started twice.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jobwarden


def _record(job: jobwarden.Job) -> None:
    line = f"{job.job_id} {job.attempt}\n".encode()
    fd = os.open(os.environ["JOBWARDEN_TEST_RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class Step(jobwarden.Job):
    """A short idempotent job: records its start, then works ``seconds``."""

    timeout = 60

    def perform(self, data: Any) -> None:
        _record(self)
        time.sleep(float((data or {}).get("seconds", 0.05)))


class StepOnce(Step):
    """The same, but it must never start twice."""

    idempotent = False


#: The job id a test writes into the runs file to mark when it crashed the server.
CRASH_MARK = 0


def mark_crash(path: str) -> None:
    """Append the crash mark: starts after it happened after the crash."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{CRASH_MARK} 0\n")


def crash_doubles(started: list[int]) -> list[int]:
    """Jobs started twice where the second start does not follow the crash mark.

    An idempotent job whose claim (committed asynchronously) the crash forgot
    runs again after the server is back (the mark is written once the server
    is dead, before it starts again); any other double is a defect.
    """
    mark = started.index(CRASH_MARK) if CRASH_MARK in started else -1
    bad = []
    for job in sorted({i for i in started if i != CRASH_MARK and started.count(i) > 1}):
        where = [n for n, i in enumerate(started) if i == job]
        if len(where) != 2 or not mark < where[1]:
            bad.append(job)
    return bad


def starts(path: str) -> list[int]:
    """Job ids, one per recorded start."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [int(line.split()[0]) for line in handle if line.strip()]
    except FileNotFoundError:
        return []
