"""`jobwarden dev` runs the engine with example jobs and stops by itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _dev(tmp_path: Path, *args: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    if dsn:
        env["JOBWARDEN_DSN"] = dsn
    return subprocess.run([sys.executable, "-m", "jobwarden", "dev", "--no-view", "--port",
                           "19300", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, check=False)


def test_dev_runs_example_jobs_against_a_given_database(dsn: str, tmp_path: Path) -> None:
    out = _dev(tmp_path, "--duration", "6", "--rate", "40", dsn=dsn)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "stopped." in out.stdout
    with psycopg.connect(dsn) as conn:
        counts = dict(conn.execute(
            "SELECT status::text, count(*) FROM jobwarden.jobs GROUP BY 1").fetchall())
        hosts = conn.execute("SELECT count(DISTINCT claimed_by) FROM jobwarden.jobs "
                             "WHERE claimed_by IS NOT NULL").fetchone()
    assert counts.get("completed", 0) > 20
    assert hosts is not None and hosts[0] >= 1
    # Two worker processes, each with its own metrics endpoint.
    [workers] = [line for line in out.stdout.splitlines() if line.startswith("workers:")]
    assert "dev-1 http://127.0.0.1:" in workers and "dev-2 http://127.0.0.1:" in workers


def test_dev_without_a_dsn_starts_embedded_postgres(tmp_path: Path) -> None:
    out = _dev(tmp_path, "--duration", "3", dsn=None)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "starting embedded PostgreSQL" in out.stdout
    assert (tmp_path / ".jobwarden" / "dev-postgres" / "PG_VERSION").exists()
    assert "completed=" in out.stdout
