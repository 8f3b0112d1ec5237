"""Processes know the schema (docs/upgrades.md, "Processes know the schema").

The schema records which release applied each migration and the oldest release
it still serves; a worker records the release it runs and the newest migration
it needs; ``jobwarden status`` lists the releases running; a worker started on
a schema that no longer serves its release says so in one line and exits 14,
one started on a schema that lacks its migrations exits 4 ("run `jobwarden
migrate`"), and one on a schema that a later release migrated but that still
serves it runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from jobwarden import version
from jobwarden.db import migrations
from tests.support.waiting import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEWEST = migrations.available()[-1]
RECORDED_FROM = next(m.version for m in migrations.available()
                     if "CREATE TABLE {schema}.migration_releases" in m.sql)


def jw(*args: str, dsn: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env.update(PYTHONPATH=REPO, JOBWARDEN_DSN=dsn)
    return subprocess.run([sys.executable, "-m", "jobwarden", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _later(release: str) -> str:
    major, minor, _ = version.parse(release)
    return f"{major}.{minor + 1}.0"


def _run(dsn: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def test_migrate_records_who_applied_each_migration_and_what_it_serves(dsn: str) -> None:
    rows = _run(dsn, "SELECT version, applied_by, serves_from FROM jobwarden.migration_releases "
                     "ORDER BY version")
    assert rows == [(m.version, version.VERSION, migrations.serves_from(m.version))
                    for m in migrations.available() if m.version >= RECORDED_FROM]


def test_the_sql_script_records_the_same_as_migrate(dsn: str) -> None:
    schema = f"jw_script_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(migrations.script(schema).replace("BEGIN;", "").replace("COMMIT;", ""))
        rows = conn.execute(sql.SQL("SELECT version, applied_by, serves_from FROM {}."
                                    "migration_releases ORDER BY version").format(
                                        sql.Identifier(schema))).fetchall()
    assert rows == [(m.version, version.VERSION, None)
                    for m in migrations.available() if m.version >= RECORDED_FROM]


def _start_and_stop(spawn_worker: Callable[..., subprocess.Popen[bytes]], dsn: str) -> None:
    proc = spawn_worker("--concurrency", "1")
    wait_for(lambda: _run(dsn, "SELECT count(*) FROM jobwarden.workers WHERE pid = %s",
                          (proc.pid,))[0][0] == 1, timeout=60, message="the worker's row",
             check=lambda: None if proc.poll() is None else pytest.fail("worker exited"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_a_worker_records_its_release_and_status_lists_the_releases_running(
        dsn: str, spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    proc = spawn_worker("--concurrency", "1")
    wait_for(lambda: _run(dsn, "SELECT jobwarden_version, schema_needs FROM jobwarden.workers "
                               "WHERE pid = %s", (proc.pid,)) == [(version.VERSION,
                                                                    NEWEST.version)],
             timeout=60, message="the worker's row with its release",
             check=lambda: None if proc.poll() is None else pytest.fail("worker exited"))
    # A 0.1.0 worker registers as 0.1.0's worker_insert does: without the new columns.
    _run(dsn, "INSERT INTO jobwarden.hosts (name) VALUES ('old-host')")
    _run(dsn, "INSERT INTO jobwarden.workers (id, host, pid, concurrency, queues, code_version) "
              "VALUES (gen_random_uuid(), 'old-host', 1, 4, '{}', 'v1')")
    status = json.loads(jw("status", "--json", dsn=dsn).stdout)
    assert status["versions"] == [
        {"release": None, "schema_needs": None, "workers": 1},
        {"release": version.VERSION, "schema_needs": NEWEST.version, "workers": 1}]
    assert status["schema"] == {"newest_migration": NEWEST.version, "serves_from": None}
    text = jw("status", dsn=dsn)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(line.split()[:4] == ["0.1.0", "or", "older", "-"] and line.split()[-1] == "1"
               for line in lines), text.stdout
    assert any(line.split() == [version.VERSION, f"{NEWEST.version:04d}", "1"]
               for line in lines), text.stdout
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_a_schema_that_no_longer_serves_this_release_stops_a_worker_with_exit_14(
        dsn: str, spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    later = _later(version.VERSION)
    future = NEWEST.version + 1
    _run(dsn, "INSERT INTO jobwarden.schema_migrations (version, name) VALUES (%s, 'future')",
         (future,))
    _run(dsn, "INSERT INTO jobwarden.migration_releases (version, applied_by, serves_from) "
              "VALUES (%s, %s, %s)", (future, _later(later), later))
    proc = spawn_worker()
    assert proc.wait(timeout=60) == 14
    for args in (("run-job", "--job-id", "1",
                  "--claim-token", "00000000-0000-0000-0000-000000000001"),
                 ("operator",)):  # after its own migrate, before it reconciles anything
        out = jw(*args, dsn=dsn)
        assert out.returncode == 14, out.stderr
        assert out.stderr.splitlines() == [
            f"jobwarden: error: the Jobwarden schema 'jobwarden' (migration {future:04d}) "
            f"serves release {later} or later, and this is {version.VERSION}: "
            f"run jobwarden {later} or later"]


def test_a_schema_a_later_release_migrated_that_still_serves_this_one_runs_a_worker(
        dsn: str, spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    """The previous release during a rolling upgrade, or after a helm rollback."""
    future = NEWEST.version + 1
    _run(dsn, "INSERT INTO jobwarden.schema_migrations (version, name) VALUES (%s, 'future')",
         (future,))
    _run(dsn, "INSERT INTO jobwarden.migration_releases (version, applied_by, serves_from) "
              "VALUES (%s, %s, %s)", (future, _later(version.VERSION), version.VERSION))
    _start_and_stop(spawn_worker, dsn)


def test_a_schema_without_this_releases_migrations_says_run_migrate_and_exits_4(
        dsn: str, spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    _run(dsn, "DELETE FROM jobwarden.schema_migrations WHERE version = %s", (NEWEST.version,))
    proc = spawn_worker()
    assert proc.wait(timeout=60) == 4
    out = jw("run-job", "--job-id", "1",
             "--claim-token", "00000000-0000-0000-0000-000000000001", dsn=dsn)
    assert out.returncode == 4 and "run `jobwarden migrate`" in out.stderr
    assert len(out.stderr.splitlines()) == 1
