"""Helpers for the host-registry tests: reading the database the way an operator would.

Sampling and interval maths live here so the tests read like specifications.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent.parent


def processing_on(dsn: str, host: str) -> int:
    """Jobs in ``processing`` claimed by ``host`` right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM jobwarden.jobs WHERE status = 'processing' AND claimed_by = %s",
            (host,)).fetchone()
    assert row is not None
    return int(row[0])


def audit_intervals(dsn: str) -> list[tuple[int, int, datetime.datetime, datetime.datetime]]:
    """(job id, pid, start, end) of every attempt that recorded both a start and an end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.job_id, s.pid, s.at, e.at FROM public.audit s "
            "JOIN public.audit e ON e.job_id = s.job_id AND e.attempt = s.attempt "
            "AND e.event = 'end' WHERE s.event = 'start' ORDER BY s.at").fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def max_overlap(intervals: Sequence[tuple[datetime.datetime, datetime.datetime]]) -> int:
    """The largest number of intervals open at one instant (an end before a start on ties)."""
    events: list[tuple[datetime.datetime, int]] = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    current = best = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best


def run_cli(dsn: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``jobwarden ARGS`` as a real subprocess against ``dsn``."""
    full_env: dict[str, Any] = {**os.environ, "JOBWARDEN_DSN": dsn,
                                "JOBWARDEN_TEST_AUDIT_DSN": dsn, "PYTHONPATH": str(REPO),
                                **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobwarden", *args], env=full_env, cwd=REPO, capture_output=True,
        text=True, timeout=timeout, check=False)


def set_last_seen(dsn: str, *, host: str, seconds_ago: float) -> None:
    """Pretend a host and its processes were last seen ``seconds_ago`` (database clock)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.hosts SET last_seen_at = now() - make_interval(secs => %s) "
                     "WHERE name = %s", (seconds_ago, host))
        conn.execute("UPDATE jobwarden.workers SET last_seen_at = now() - "
                     "make_interval(secs => %s) WHERE host = %s", (seconds_ago, host))


def start_cli(dsn: str, *args: str) -> subprocess.Popen[str]:
    """Start ``jobwarden ARGS`` in the background, its stdout readable line by line."""
    full_env: dict[str, Any] = {**os.environ, "JOBWARDEN_DSN": dsn, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "jobwarden", *args], env=full_env, cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=1)


def fake_running_job(db: Any, client: Any, *, host: str, code_version: str = "") -> Any:
    """Register ``host`` (as a process would) and give it one claimed, processing job."""
    import uuid

    from tests.support import testjobs

    db.hosts.register(host=host, pool="default", code_version=code_version, cap=None,
                      worker_id=uuid.uuid4(), pid=1, concurrency=1, queues=())
    client.enqueue(testjobs.Record)
    [claim] = db.jobs.claim(host=host, limit=1, grace_seconds=600, host_cap=True)
    return claim
