"""Recipe (docs/recipes.md): a minimal Django project against the real database --
settings, enqueue in transaction.atomic, a management command running the worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

import jobwarden

PROJECT = Path(__file__).resolve().parent / "djangoproject"
REPO = PROJECT.parents[2]


def manage(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=_env(dsn),
                          capture_output=True, text=True, timeout=120, check=False)


def _env(dsn: str) -> dict[str, str]:
    return {**os.environ, "JOBWARDEN_DSN": dsn, "DJANGO_SETTINGS_MODULE": "djangosite.settings",
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(REPO)])}


def test_an_order_and_its_job_commit_together_and_the_worker_command_runs_it(
        client: jobwarden.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, receipt_sent bool DEFAULT false)")
    declined = manage(dsn, "place_order", "1", "--fail")
    assert "payment declined" in declined.stderr, declined.stderr
    assert client.jobs() == []
    placed = manage(dsn, "place_order", "2")
    assert placed.returncode == 0, placed.stderr
    job_id = int(placed.stdout.strip())
    worker = subprocess.Popen([sys.executable, "manage.py", "jobwarden_worker", "--",
                               "--poll-interval", "0.05"], cwd=PROJECT, env=_env(dsn),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert client.wait(job_id, timeout=60) == "receipt for order 2"
    finally:
        worker.send_signal(signal.SIGTERM)  # drains and exits
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT id, receipt_sent FROM orders").fetchall() == [(2, True)]
