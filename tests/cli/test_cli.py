"""The command line as users run it: real processes, exit codes, --json output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.support import postgres

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def jw(*args: str, dsn: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env["PYTHONPATH"] = REPO
    if dsn is not None:
        env["JOBWARDEN_DSN"] = dsn
    return subprocess.run([sys.executable, "-m", "jobwarden", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_enqueue_show_list_cancel_retry_purge_status_round_trip(dsn: str) -> None:
    out = jw("enqueue", "tests.support.testjobs:Record", "--data", '{"x": 1}', "--queue", "q1",
             "--unique-key", "once", "--json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    again = json.loads(jw("enqueue", "tests.support.testjobs:Record", "--unique-key", "once",
                          "--json", dsn=dsn).stdout)
    assert again == {"id": job_id, "duplicate": True}
    shown = json.loads(jw("jobs", "show", str(job_id), "--json", dsn=dsn).stdout)
    assert (shown["queue"], shown["data"], shown["status"]) == ("q1", {"x": 1}, "pending")
    listed = json.loads(jw("jobs", "list", "--status", "pending", "--json", dsn=dsn).stdout)
    assert [j["id"] for j in listed] == [job_id]
    cancelled = jw("jobs", "cancel", str(job_id), "--json", dsn=dsn)
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["status"] == "cancelled"
    retried = jw("jobs", "retry", str(job_id), "--json", dsn=dsn)
    assert retried.returncode == 0 and json.loads(retried.stdout)["status"] == "pending"
    status = json.loads(jw("status", "--json", dsn=dsn).stdout)
    assert status["queues"]["q1"]["pending"] == 1
    assert json.loads(jw("jobs", "purge", "--status", "cancelled", "--json",
                         dsn=dsn).stdout) == {"deleted": 0}


@pytest.mark.parametrize("args,code,message", [
    (("enqueue", "tests.support.testjobs:Record", "--data", "{oops"), 7, "not valid JSON"),
    (("enqueue", "tests.support.testjobs:Nope"), 5, "has no 'Nope'"),
    (("enqueue", "nocolon"), 5, "must look like"),
    (("jobs", "show", "999999"), 6, "no job with id 999999"),
])
def test_bad_input_gets_a_clear_message_and_its_exit_code(dsn: str, args: tuple[str, ...],
                                                          code: int, message: str) -> None:
    out = jw(*args, dsn=dsn)
    assert out.returncode == code, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobwarden.jobs").fetchone() == (0,)


def test_an_unreachable_database_exits_3_without_the_password(dsn: str) -> None:
    out = jw("status", dsn="postgresql://postgres:s3cret@127.0.0.1:1/x")
    assert out.returncode == 3
    assert "cannot connect" in out.stderr and "s3cret" not in out.stderr


def test_no_dsn_exits_9_and_says_how_to_set_it() -> None:
    out = jw("status")
    assert out.returncode == 9 and "JOBWARDEN_DSN" in out.stderr


def test_a_database_without_the_schema_exits_4_and_names_the_fix(
        database_factory: postgres.DatabaseFactory, pg_server: str) -> None:
    empty = f"jw_empty_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        empty_dsn = postgres.with_database(pg_server, empty)
        out = jw("status", dsn=empty_dsn)
        assert out.returncode == 4 and "jobwarden migrate" in out.stderr
        # migrate --sql prints what migrate would do; applying it by hand works.
        script = jw("migrate", "--sql", dsn=empty_dsn)
        assert script.returncode == 0
        subprocess.run(["psql", empty_dsn, "-v", "ON_ERROR_STOP=1", "-q"], input=script.stdout,
                       text=True, check=True, capture_output=True)
        assert jw("status", dsn=empty_dsn).returncode == 0
        again = jw("migrate", "--json", dsn=empty_dsn)
        assert json.loads(again.stdout)["applied"] == []
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{empty}" WITH (FORCE)')


def test_migrate_into_a_custom_schema_keeps_apps_apart(dsn: str) -> None:
    out = jw("--schema", "billing_jobs", "migrate", "--json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "0001_jobs" in json.loads(out.stdout)["applied"]
    jw("--schema", "billing_jobs", "enqueue", "tests.support.testjobs:Record", dsn=dsn)
    billing = json.loads(jw("--schema", "billing_jobs", "status", "--json", dsn=dsn).stdout)
    default = json.loads(jw("status", "--json", dsn=dsn).stdout)
    assert billing["queues"]["default"]["pending"] == 1
    assert default["queues"] == {}
