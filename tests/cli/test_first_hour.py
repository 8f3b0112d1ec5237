"""A new user's first hour, as docs/cli.md promises it: real processes, exit codes, no
tracebacks, and nothing changed by a command that refused its input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from jobwarden.cli import (
    EXIT_BROKEN_PIPE,
    EXIT_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_SCHEMA_MISSING,
    EXIT_UNKNOWN_JOB,
    EXIT_USAGE,
    HelpFormatter,
    _subcommands,
    build_parser,
)
from jobwarden.cli.arguments import parse_duration
from tests.support.waiting import wait_for

#: The installed console script, as a user runs it (not ``python -m``, which puts
#: the current directory on the path by itself).
JOBWARDEN = str(Path(sys.executable).parent / "jobwarden")

APP = textwrap.dedent('''
    import jobwarden

    class Hello(jobwarden.Job):
        def perform(self, data):
            return {"hello": data["name"]}
''')


def run(*args: str, dsn: str | None = None, cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JOBWARDEN_") and k != "PYTHONPATH"}
    if dsn is not None:
        env["JOBWARDEN_DSN"] = dsn
    return subprocess.run([JOBWARDEN, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The one error line on stderr (log lines, which start with a timestamp, aside)."""
    lines = [line for line in out.stderr.strip().splitlines() if not line[:4].isdigit()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def count_jobs(dsn: str, schema: str = "jobwarden") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.jobs").fetchone()  # noqa: S608
    return int(row[0]) if row else 0


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A user's project: ``myapp/jobs.py`` in the directory commands run from."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(APP)
    return tmp_path


# -- the current directory is importable ------------------------------------------------


def test_the_readme_app_is_found_in_the_current_directory(dsn: str, app_dir: Path) -> None:
    enqueued = run("enqueue", "myapp.jobs:Hello", "--data", '{"name": "ada"}', "--json",
                   dsn=dsn, cwd=app_dir)
    assert enqueued.returncode == 0, enqueued.stderr
    ticked = run("tick", "--app", "myapp.jobs", "--host", "first-hour", "--json", dsn=dsn,
                 cwd=app_dir)
    assert ticked.returncode == 0, ticked.stderr
    assert json.loads(ticked.stdout)["outcomes"] == {"completed": 1}
    scheduled = run("schedules", "set", "hello", "--interval", "1h", "--job",
                    "myapp.jobs:Hello", dsn=dsn, cwd=app_dir)
    assert scheduled.returncode == 0, scheduled.stderr


def test_a_worker_runs_the_readme_app_from_its_directory(dsn: str, app_dir: Path) -> None:
    job_id = json.loads(run("enqueue", "myapp.jobs:Hello", "--data", '{"name": "grace"}',
                            "--json", dsn=dsn, cwd=app_dir).stdout)["id"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JOBWARDEN_") and k != "PYTHONPATH"}
    worker = subprocess.Popen([JOBWARDEN, "--dsn", dsn, "worker", "--app", "myapp.jobs",
                               "--poll-interval", "100ms"], cwd=app_dir, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        def status() -> str:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT status::text FROM jobwarden.jobs WHERE id = %s",
                                   (job_id,)).fetchone()
            return str(row[0]) if row else ""

        wait_for(lambda: status() == "completed" or worker.poll() is not None, timeout=60,
                 message="the job to complete")
        assert status() == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "ModuleNotFoundError" not in err


@pytest.mark.parametrize("command", [
    ("worker", "--app", "myapp.nosuch"),
    ("tick", "--app", "myapp.nosuch"),
    ("enqueue", "myapp.jobs:Hello", "--app", "myapp.nosuch"),
    ("schedules", "set", "x", "--interval", "1h", "--job", "myapp.jobs:Hello",
     "--app", "myapp.nosuch"),
])
def test_an_app_module_that_does_not_import_is_one_line_and_exit_5(
        dsn: str, app_dir: Path, command: tuple[str, ...]) -> None:
    out = run(*command, dsn=dsn, cwd=app_dir)
    assert out.returncode == EXIT_UNKNOWN_JOB
    assert "myapp.nosuch" in one_error_line(out)
    assert count_jobs(dsn) == 0


def test_schedules_set_refuses_a_class_its_importable_module_lacks(dsn: str,
                                                                  app_dir: Path) -> None:
    out = run("schedules", "set", "typo", "--interval", "1h", "--job", "myapp.jobs:Helo",
              dsn=dsn, cwd=app_dir)
    assert out.returncode == EXIT_UNKNOWN_JOB and "'Helo'" in one_error_line(out)
    assert run("schedules", "show", "typo", dsn=dsn, cwd=app_dir).returncode == EXIT_NOT_FOUND
    # A module that is not importable here (its code lives in the workers) is stored.
    elsewhere = run("schedules", "set", "remote", "--interval", "1h", "--job",
                    "workers_only.jobs:Report", dsn=dsn, cwd=app_dir)
    assert elsewhere.returncode == 0, elsewhere.stderr


# -- worker start-up ------------------------------------------------------------------------


def test_a_worker_before_migrate_says_so_in_one_line_and_exits_4(dsn: str,
                                                                app_dir: Path) -> None:
    out = run("--schema", "not_migrated", "worker", "--app", "myapp.jobs", dsn=dsn,
              cwd=app_dir)
    assert out.returncode == EXIT_SCHEMA_MISSING
    assert "run `jobwarden migrate`" in one_error_line(out)


def test_a_busy_http_port_is_one_line_and_exit_9(dsn: str, app_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("worker", "--app", "myapp.jobs", "--http-port", str(port), dsn=dsn,
                  cwd=app_dir)
    assert out.returncode == EXIT_CONFIG
    assert f"--http-port {port} is already in use" in one_error_line(out)


def test_a_worker_without_app_warns_that_it_knows_no_job_classes(dsn: str,
                                                                 app_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    worker = subprocess.Popen([JOBWARDEN, "--dsn", dsn, "worker"], cwd=app_dir, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + 60
        seen = ""
        while " started: " not in seen and time.monotonic() < deadline:  # signals handled
            seen += worker.stderr.readline()
        assert "knows no job classes" in seen and "WARNING" in seen
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert worker.returncode == 0


# -- flags ----------------------------------------------------------------------------------


def test_global_flags_work_after_the_subcommand(dsn: str) -> None:
    assert run("migrate", "--dsn", dsn, "--schema", "late_flags").returncode == 0
    enqueued = run("enqueue", "tests.support.testjobs:Record", "--no-check", "--dsn", dsn,
                   "--schema", "late_flags", "--log-format", "json", "--json")
    assert enqueued.returncode == 0, enqueued.stderr
    before = run("--json", "--dsn", dsn, "--schema", "late_flags", "jobs", "list")
    after = run("jobs", "list", "--json", "--dsn", dsn, "--schema", "late_flags")
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert [j["id"] for j in json.loads(after.stdout)] == [json.loads(enqueued.stdout)["id"]]
    assert count_jobs(dsn) == 0  # the default schema was not touched


def test_a_closed_pipe_ends_quietly(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (queue, job_class, data) "
                     "SELECT 'default', 'x.y:Z', jsonb_build_object('n', n) "
                     "FROM generate_series(1, 2000) n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    proc = subprocess.Popen([JOBWARDEN, "--dsn", dsn, "jobs", "list", "--json", "--limit",
                             "1000"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"["  # what `| head -1` reads
    proc.stdout.close()  # ... before it goes away
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert err == ""


def test_purge_without_a_filter_asks_and_a_script_needs_yes(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (queue, job_class, status, finished_at) "
                     "VALUES ('default', 'x.y:Z', 'completed', now())")
    refused = run("jobs", "purge", dsn=dsn)  # stdin is not a terminal: no one to ask
    assert refused.returncode == EXIT_USAGE and "--yes" in one_error_line(refused)
    assert count_jobs(dsn) == 1
    assert json.loads(run("jobs", "purge", "--yes", "--json", dsn=dsn).stdout) == {
        "deleted": 1}
    # A filter is an answer already.
    assert run("jobs", "purge", "--older-than", "1h", dsn=dsn).returncode == 0


@pytest.mark.parametrize("text,seconds", [
    ("90", 90.0), ("1.5", 1.5), ("90s", 90.0), ("15m", 900.0), ("1h", 3600.0),
    ("2d", 172800.0), ("250ms", 0.25), ("0", 0.0),
])
def test_durations_take_seconds_or_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-5", "5x", "1h30", "inf", "nan", "ten"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_enqueue_delay_takes_a_duration(dsn: str) -> None:
    out = run("enqueue", "tests.support.testjobs:Record", "--no-check", "--delay", "15m",
              "--json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM run_at - created_at) FROM jobwarden.jobs"
                           ).fetchone()
    assert row is not None and 899 < float(row[0]) <= 900.5


def test_every_flag_has_help_showing_its_default() -> None:
    parser = build_parser()
    missing = []
    for sub in [parser, *_subcommands(parser)]:
        formatter = HelpFormatter(sub.prog)
        for action in sub._actions:
            if not action.option_strings or action.dest in ("help", "version"):  # no value
                continue
            text = formatter._get_help_string(action) or ""
            if not action.help or ("default" not in text and not action.required):
                missing.append(f"{sub.prog} {'/'.join(action.option_strings)}")
    assert missing == []


# -- bad input: one line, a documented code, nothing changed -------------------------------


@pytest.mark.parametrize("args", [
    ("jobs", "list", "--limit", "-1"),
    ("drain", "--host", ""),
    ("drain", "--host", "   "),
    ("resume", "--host", ""),
    ("tick", "--timeout", "0"),
    ("tick", "--max-jobs", "-1"),
    ("enqueue", "x.y:Z", "--queue", ""),
    ("worker", "--concurrency", "0"),
    ("worker", "--poll-interval", "soon"),
])
def test_bad_flags_are_one_line_and_exit_2(dsn: str, args: tuple[str, ...]) -> None:
    out = run(*args, dsn=dsn)
    assert out.returncode == EXIT_USAGE
    assert ": error: " in one_error_line(out)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobwarden.hosts WHERE draining").fetchone() \
            == (0,)
    assert count_jobs(dsn) == 0


def test_a_long_bad_value_is_not_echoed_in_full(dsn: str) -> None:
    out = run("enqueue", "x.y:Z", "--delay", "9" * 5000 + "x", dsn=dsn)
    line = one_error_line(out)
    assert out.returncode == EXIT_USAGE and len(line) < 300 and "5001 characters" in line


def test_resume_of_an_unknown_host_is_an_error_on_stderr(dsn: str) -> None:
    out = run("resume", "--host", "no-such-host", dsn=dsn)
    assert out.returncode == EXIT_NOT_FOUND
    assert out.stdout == "" and "no-such-host" in one_error_line(out)



# -- logs -----------------------------------------------------------------------------------


def test_json_logs_carry_the_attempt_as_fields_and_a_utc_timestamp(dsn: str) -> None:
    import datetime

    import jobwarden
    from tests.support import testjobs

    with jobwarden.Client(dsn) as client:
        job_id = client.enqueue(testjobs.Boom, max_retries=0, queue="loud").id
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env["JOBWARDEN_TEST_AUDIT_DSN"] = dsn
    worker = subprocess.Popen(
        [JOBWARDEN, "--dsn", dsn, "worker", "--app", "tests.support.testjobs", "--host",
         "json-host", "--poll-interval", "100ms", "--log-format", "json"],
        env=env, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    lines: list[dict[str, object]] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                line.get("job_id") == job_id for line in lines):
            text = worker.stderr.readline()
            if text:
                lines.append(json.loads(text))  # every line is one JSON object
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    about = [line for line in lines if line.get("job_id") == job_id]
    assert about, lines
    line = about[0]
    assert (line["job_class"], line["attempt"], line["queue"], line["host"]) == (
        "tests.support.testjobs:Boom", 1, "loud", "json-host")
    stamp = str(line["time"])
    assert stamp.endswith("Z")
    parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert parsed.utcoffset() == datetime.timedelta(0)
    assert all(entry.get("host") == "json-host" for entry in lines)


def test_status_shows_delayed_jobs_as_scheduled_not_pending(dsn: str) -> None:
    for delay in ("0", "1h", "1h"):
        assert run("enqueue", "tests.support.testjobs:Record", "--no-check", "--queue", "q",
                   "--delay", delay, dsn=dsn).returncode == 0
    out = run("status", "--json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout)["queues"]["q"]
    assert (counts["pending"], counts["scheduled"]) == (1, 2)
    table = run("status", dsn=dsn).stdout.splitlines()
    header = table[0].split()
    row = next(line.split() for line in table if line.startswith("q "))
    assert (row[header.index("PENDING")], row[header.index("SCHEDULED")]) == ("1", "2")
