"""`jobwarden dev` runs the engine with example jobs and stops by itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from jobwarden.cli import EXIT_INTERRUPTED
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _dev(tmp_path: Path, *args: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    if dsn:
        env["JOBWARDEN_DSN"] = dsn
    return subprocess.run([sys.executable, "-m", "jobwarden", "dev", "--no-view", "--port",
                           "19300", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, check=False)


def _counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(  # type: ignore[arg-type]
            "SELECT status::text, count(*) FROM jobwarden.jobs GROUP BY 1").fetchall())


def test_ctrl_c_in_a_terminal_drains_the_workers_and_exits_130(dsn: str,
                                                               tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env["JOBWARDEN_DSN"] = dsn
    # Its own process group, like a shell's foreground job: Ctrl-C signals the group.
    dev = subprocess.Popen([sys.executable, "-m", "jobwarden", "dev", "--no-view", "--port",
                            "19300", "--rate", "40"], env=env, cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        wait_for(lambda: (_counts(dsn).get("completed", 0) >= 20
                 and _counts(dsn).get("processing", 0) > 0) or dev.poll() is not None,
                 timeout=120, interval=0.1, message="jobs completed and some running")
        assert dev.poll() is None
        os.killpg(dev.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        out, err = dev.communicate(timeout=120)
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.communicate()
    assert dev.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "stopped." in out
    assert "adding example jobs to database" in out.splitlines()[0]
    # Every job that was running finished (or was given back): none is left behind.
    assert _counts(dsn).get("processing", 0) == 0
    with psycopg.connect(dsn) as conn:
        hosts = conn.execute("SELECT count(DISTINCT claimed_by) FROM jobwarden.jobs "
                             "WHERE claimed_by IS NOT NULL").fetchone()
    assert hosts is not None and hosts[0] >= 1
    # Two worker processes, each with its own metrics endpoint.
    [workers] = [line for line in out.splitlines() if line.startswith("workers:")]
    assert "dev-1 http://127.0.0.1:" in workers and "dev-2 http://127.0.0.1:" in workers


@pytest.mark.db  # its own embedded PostgreSQL, not the pg_server fixture
def test_dev_without_a_dsn_starts_embedded_postgres(tmp_path: Path) -> None:
    # Run as root, the server runs as the user embedded_postgres, which cannot enter
    # pytest's 0700 temporary directories: a working directory it can reach.
    home = Path(tempfile.mkdtemp(prefix="jobwarden-dev-"))
    home.chmod(0o755)
    try:
        _check_dev_with_embedded_postgres(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _check_dev_with_embedded_postgres(tmp_path: Path) -> None:
    out = _dev(tmp_path, "--duration", "3", dsn=None)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "starting embedded PostgreSQL" in out.stdout
    assert "export JOBWARDEN_DSN=" in out.stdout
    assert "embedded_postgres" not in out.stderr  # its INFO lines only with -v
    assert (tmp_path / ".jobwarden" / "dev-postgres" / "PG_VERSION").exists()
    assert "completed=" in out.stdout
