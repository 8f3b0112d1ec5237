"""docs/cli.md's exit-code table, checked against real `jobwarden` processes.

The table is parsed from the document (not copied here), so a code added to,
changed in or removed from the doc without a matching invocation fails
:func:`test_every_documented_code_is_shown_by_a_real_invocation`, and an
invocation whose code disagrees with the doc fails its own case. Codes whose
invocation needs machinery of its own (a pod run's lease, a stop grace, a
later release's schema) name the test that runs that process and asserts the
code; that the named test exists and asserts it is checked here too.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import jobwarden
import jobwarden.cli
from jobwarden.db.database import Database
from jobwarden.podruns import runjob
from jobwarden.worker import worker as worker_module
from tests.support import testjobs
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def documented_codes() -> dict[int, str]:
    """The rows of docs/cli.md's "## Exit codes" table: code -> meaning (10-13 expanded)."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    codes: dict[int, str] = {}
    for line in section.splitlines():
        found = re.fullmatch(r"\| (\d+)(?:-(\d+))? \| (.+) \|", line.strip())
        if found:
            low, high = int(found.group(1)), int(found.group(2) or found.group(1))
            for code in range(low, high + 1):
                codes[code] = found.group(3)
    assert codes, "no exit-code table found in docs/cli.md"
    return codes


@dataclasses.dataclass(frozen=True)
class Case:
    code: int
    args: tuple[str, ...]
    #: Prepares the database; returns values for {placeholders} in args.
    setup: Callable[[jobwarden.Client, Database], dict[str, str]] | None = None
    env: tuple[tuple[str, str], ...] = ()
    no_dsn: bool = False
    one_line: bool = True  # stderr is exactly one line (usage and other errors)

    @property
    def id(self) -> str:
        return f"{self.code}: {' '.join(self.args)[:60]}"


def _pending(client: jobwarden.Client, _db: Database) -> dict[str, str]:
    return {"job": str(client.enqueue(testjobs.Record, queue="q").id)}


def _busy_host(client: jobwarden.Client, db: Database) -> dict[str, str]:
    db.hosts.register(host="busy-1", pool="default", code_version="v1", cap=4,
                      worker_id=uuid.uuid4(), pid=1, concurrency=4, queues=[])
    client.enqueue(testjobs.Record, queue="q")
    db.jobs.claim(host="busy-1", limit=1, grace_seconds=600, queues=["q"])
    return {}


def _schedule(client: jobwarden.Client, _db: Database) -> dict[str, str]:
    client.schedules.upsert("nightly", cron="0 3 * * *", job_class=testjobs.Record)
    return {}


CASES = [
    Case(0, ("status",)),
    Case(0, ("jobs", "list", "--limit", "1000")),
    Case(1, ("jobs", "retry", "{job}"), setup=_pending, one_line=False),
    Case(2, ("jobs", "list", "--limit", "-1")),
    Case(2, ("jobs", "list", "--limit", "5000")),  # issue 28: was 7
    Case(2, ("jobs", "list", "--limit", "0")),
    Case(2, ("jobs", "list", "--since", "yesterday")),
    Case(2, ("jobs", "list", "--since", "99999999999999d")),  # was a traceback
    Case(2, ("jobs", "list", "--since", "1h", "--until", "2h")),
    Case(2, ("jobs", "list", "--before", "99999999999999999999")),
    Case(2, ("jobs", "show", "99999999999999999999")),
    Case(2, ("jobs", "purge",)),
    Case(2, ("drain", "--host", "")),
    Case(2, ("tick", "--timeout", "0")),
    Case(2, ("enqueue", "tests.support.testjobs:Record", "--delay", "soon")),
    Case(2, ("queues", "pause", " ")),  # issue 28: a blank queue was paused
    Case(2, ("queues", "list", "--window", "0")),  # was 7
    Case(2, ("top", "--interval", "0")),  # was 7
    Case(2, ("leases", "list", "--limit", "-3")),
    Case(2, ("queues", "resume", "")),
    Case(2, ("console", "--port", "70000")),  # was 9
    Case(2, ("console", "--refresh", "0.1")),  # was 9
    Case(2, ("operator", "--http-port", "99999")),  # was a connection attempt, then 3
    # Values beyond what any column, interval or timer holds: each was a traceback
    # (exit 1), a crashed worker thread (70) or a command that never ended.
    Case(2, ("leases", "list", "--limit", "99999999999999999999")),
    Case(2, ("jobs", "purge", "--older-than", "99999999999999d", "--yes")),
    Case(2, ("enqueue", "tests.support.testjobs:Record", "--delay", "99999999999999d")),
    Case(2, ("drain", "--host", "h", "--expires", "99999999999999d")),
    Case(2, ("worker", "--prefetch", "99999999999999999999")),
    Case(2, ("worker", "--poll-interval", "99999999999999d")),
    Case(2, ("schedules", "next", "nightly", "-n", "99999999999999999999"), setup=_schedule),
    Case(2, ("run-job", "--job-id", "1", "--lease-token", "99999999999999999999",
             "--claim-token", str(uuid.UUID(int=1)))),
    Case(3, ("status",), env=(("JOBWARDEN_DSN", "postgresql://127.0.0.1:1/none"),)),
    Case(4, ("--schema", "not_migrated", "status")),
    Case(5, ("enqueue", "no_such_module.jobs:Job")),
    Case(6, ("jobs", "show", "424242")),
    Case(6, ("drain", "--host", "no-such-host"), one_line=False),  # an INFO line too
    Case(7, ("enqueue", "tests.support.testjobs:Record", "--data", "{{not json")),
    Case(7, ("enqueue", "tests.support.testjobs:Record", "--priority", "3000000000")),
    Case(7, ("schedules", "set", "nightly", "--cron", "0 3 * * *", "--job",
             "tests.support.testjobs:Record", "--priority", "3000000000")),
    Case(8, ("drain", "--host", "busy-1", "--wait", "0.5s"), setup=_busy_host,
         one_line=False),
    Case(9, ("status",), no_dsn=True),
    Case(9, ("status",), env=(("JOBWARDEN_DSN_FILE", "/nonexistent/dsn"),), no_dsn=True),
    Case(9, ("worker",), env=(("JOBWARDEN_POLL_INTERVAL", "99999999999999d"),)),  # was 70
    # Numbers beyond what they name, in variables: a traceback (1) or a crashed thread (70).
    Case(9, ("worker",), env=(("JOBWARDEN_CONCURRENCY", "99999999999999999999"),)),
    Case(9, ("worker",), env=(("JOBWARDEN_HOST_CAP", "99999999999999999999"),),
         one_line=False),  # after the no --app warning
    Case(9, ("worker",), env=(("JOBWARDEN_HTTP_PORT", "99999"),)),
    Case(9, ("run-job",), env=(("JOBWARDEN_JOB_ID", "99999999999999999999"),
                               ("JOBWARDEN_CLAIM_TOKEN", str(uuid.UUID(int=1))))),
    Case(9, ("run-job",), env=(("JOBWARDEN_JOB_ID", "1"),
                               ("JOBWARDEN_LEASE_TOKEN", "99999999999999999999"),
                               ("JOBWARDEN_CLAIM_TOKEN", str(uuid.UUID(int=1))))),
    Case(10, ("run-job", "--job-id", "{job}", "--claim-token", str(uuid.UUID(int=1))),
         setup=_pending),
]

#: Codes shown by a real process elsewhere: (test file, test function, what it asserts).
ELSEWHERE = {
    11: ("tests/podruns/test_run_job.py", "runjob.EXIT_CANCELLED"),
    12: ("tests/podruns/test_run_job.py", "runjob.EXIT_NOT_RUN"),
    13: ("tests/podruns/test_run_job.py", "runjob.EXIT_STOPPED"),
    14: ("tests/cli/test_schema_releases.py", "== 14"),
}
#: Shown below by processes this file starts and signals.
SIGNALLED = {70, 130, 141}


def _env(dsn: str, case: Case | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env["PYTHONPATH"] = str(REPO)
    if case is None or not case.no_dsn:
        env["JOBWARDEN_DSN"] = dsn
    env.update(dict(case.env) if case else {})
    return env


def jw_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "jobwarden", *args]


def test_every_documented_code_is_shown_by_a_real_invocation() -> None:
    shown = {c.code for c in CASES} | set(ELSEWHERE) | SIGNALLED
    assert shown == set(documented_codes())


def test_the_table_and_the_code_s_constants_agree() -> None:
    constants = {getattr(jobwarden.cli, n) for n in dir(jobwarden.cli) if n.startswith("EXIT_")}
    constants |= {getattr(runjob, n) for n in dir(runjob) if n.startswith("EXIT_")}
    constants.add(worker_module.EXIT_CRASHED)
    assert constants == set(documented_codes())
    assert (runjob.EXIT_FENCED, runjob.EXIT_CANCELLED, runjob.EXIT_NOT_RUN,
            runjob.EXIT_STOPPED) == (10, 11, 12, 13)


@pytest.mark.parametrize("code", sorted(ELSEWHERE))
def test_codes_shown_elsewhere_are_asserted_there(code: int) -> None:
    path, needle = ELSEWHERE[code]
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    asserted = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert any(needle in text for text in asserted), (code, path, needle)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_invocation_exits_with_its_documented_code(
        case: Case, dsn: str, client: jobwarden.Client, db: Database) -> None:
    values = case.setup(client, db) if case.setup else {}
    args = [a.format(**values) for a in case.args]
    out = subprocess.run(jw_command(*args), env=_env(dsn, case), cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert out.returncode == case.code, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    if case.code not in (0, 1, 8) and case.one_line:
        assert out.stderr.count("\n") == 1, out.stderr


#: Flags whose out-of-range value is the library's own check, with the API's message:
#: docs/cli.md's table names them under 7 ("a priority outside the integer range").
LIBRARY_CHECKED = {("enqueue", "--priority"), ("schedules set", "--priority")}
#: Beyond bigint, and a duration of some 270 billion years.
HUGE = ("99999999999999999999", "99999999999999d")


def numeric_flags() -> list[tuple[str, str, argparse.Action]]:
    """(command, flag, action) of every flag or argument of every command whose value
    is a number or a duration: those whose type reads "1" as a number."""
    found: list[tuple[str, str, argparse.Action]] = []

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{command} {name}".strip())
            elif callable(action.type):
                try:
                    value = action.type("1")
                except (ValueError, TypeError, argparse.ArgumentTypeError):
                    continue
                if isinstance(value, int | float) and not isinstance(value, bool):
                    flag = max(action.option_strings, key=len, default=action.dest)
                    found.append((command, flag, action))
    walk(jobwarden.cli.build_parser(), "")
    return found


def test_every_command_has_numeric_flags_to_check() -> None:
    flags = {(command, flag) for command, flag, _ in numeric_flags()}
    assert {("jobs list", "--limit"), ("worker", "--prefetch"), ("run-job", "--lease-token"),
            ("drain", "--expires"), ("schedules next", "--count")} <= flags
    assert flags >= LIBRARY_CHECKED
    shown_by_the_library = {(command, flag) for command, flag in LIBRARY_CHECKED
                            for case in CASES if case.code == 7
                            and " ".join(case.args).startswith(command) and flag in case.args}
    assert shown_by_the_library == LIBRARY_CHECKED


def parse_checked_flags() -> list[tuple[str, str, argparse.Action]]:
    """numeric_flags() but those LIBRARY_CHECKED (shown with exit 7 in CASES)."""
    return [(c, f, a) for c, f, a in numeric_flags() if (c, f) not in LIBRARY_CHECKED]


@pytest.mark.parametrize(("command", "flag", "action"), parse_checked_flags(),
                         ids=[f"{c} {f}" for c, f, _ in parse_checked_flags()])
def test_no_number_or_duration_flag_takes_a_value_no_command_can_use(
        command: str, flag: str, action: argparse.Action) -> None:
    """Every number and duration a command takes is bounded where it is parsed (exit 2,
    before anything is touched): argparse turns a type's ValueError into a usage error."""
    assert callable(action.type)
    for value in HUGE:
        with pytest.raises((ValueError, TypeError, argparse.ArgumentTypeError)):
            action.type(value)


def _registered(client: jobwarden.Client, host: str) -> bool:
    return host in client.hosts.names(host=host)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_worker_drains_on_ctrl_c_and_exits_130_and_0_on_sigterm(
        dsn: str, client: jobwarden.Client, tmp_path: Path, signum: int, code: int) -> None:
    host = f"exit-{signum}"
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(jw_command("worker", "--app", "tests.support.testjobs",
                                           "--host", host, "--poll-interval", "0.05"),
                                env=_env(dsn), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _registered(client, host) or proc.poll() is not None, timeout=60,
                 message="the worker to register")
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code, (tmp_path / "worker.log").read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_crashed_worker_thread_stops_the_worker_with_70(dsn: str, tmp_path: Path) -> None:
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(jw_command("worker", "--app", "tests.support.crashapp"),
                                env=_env(dsn), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert proc.wait(timeout=90) == 70
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "crashapp: the maintenance thread dies" in (tmp_path / "worker.log").read_text()


def test_a_reader_that_goes_away_is_141_without_a_traceback(
        dsn: str, client: jobwarden.Client) -> None:
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(200)])
    proc = subprocess.Popen(jw_command("jobs", "list", "--json", "--limit", "200"),
                            env=_env(dsn), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head` that read nothing and left
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err
