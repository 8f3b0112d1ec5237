"""The previous release's processes survive HEAD's migration, and run on HEAD's schema
after a rollback (docs/upgrades.md, the compatibility contract; issue 25).

The previous release (the newest in releases.toml) is built from git history in
a virtualenv of its own (tests/support/releases.py). Against a database its own
``jobwarden migrate`` created, its worker (which also runs schedules and serves
the ``/tick`` route), a client enqueueing plain, batch, transactional,
exclusive and concurrency-key jobs, and a standalone lease holder run; a caller
POSTs ``/tick`` to the old worker. HEAD's ``jobwarden migrate`` runs while they
do; HEAD's worker and client start beside them; the old processes get SIGTERM.
Then the rollback: HEAD's processes stop and the previous release's run again
on HEAD's schema (a ``helm rollback`` does not undo migrations).

Asserted over both phases: every job ends completed and ran exactly once; no
old process logs an ERROR or a traceback or exits non-zero; every lease release
succeeded and no lease is left held; every tick answered 200 ok. A migration
that drops something the previous release uses fails it: the old process that
calls it logs the error and exits 1 (checked with a scratch drop, see the
report of issue 25).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import postgres, releases, upgradejobs
from tests.support.ports import free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = releases.REPO
TOKEN = "upgrade-tick-token-0123456789abcdef"
#: Worker timings: quick polling, production-like grace (a loaded machine must not
#: reap live claims, which would run a job twice for reasons that are not the upgrade).
WORKER_FLAGS = ("--app", "tests.support.upgradejobs", "--concurrency", "4",
                "--poll-interval", "0.05", "--heartbeat-interval", "1",
                "--heartbeat-grace", "60", "--reap-interval", "1", "--shutdown-grace", "30",
                "--schedule-check-seconds", "0.5")
#: How many more jobs each stage waits for before the next (progress, not time).
STAGE_JOBS = 20
WAIT = 180.0


class Process:
    """One process of the test with its log file; stopped with SIGTERM."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        with open(log, "wb") as handle:
            self.proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=handle,
                                         stderr=subprocess.STDOUT)
        self.stopped_in: float | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 120.0) -> int:
        started = time.monotonic()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self.stopped_in = time.monotonic() - started
        return code

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def errors(self) -> list[str]:
        return [line for line in self.text().splitlines()
                if " ERROR " in line or " CRITICAL " in line or "Traceback" in line]

    def summary(self) -> dict[str, Any]:
        """The JSON line a client or holder prints at exit."""
        for line in reversed(self.text().splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        raise AssertionError(f"{self.name} printed no summary:\n{self.text()[-3000:]}")


class Stack:
    """Starts the processes of one release against the test database."""

    def __init__(self, dsn: str, tmp: Path, release: str, python: Path) -> None:
        self.dsn, self.tmp, self.release, self.python = dsn, tmp, release, python
        self.started: list[Process] = []

    def env(self, **extra: str) -> dict[str, str]:
        return releases.process_env(JOBWARDEN_DSN=self.dsn, JOBWARDEN_TEST_AUDIT_DSN=self.dsn,
                                    PYTHONPATH=str(REPO), **extra)

    def start(self, role: str, args: list[str], **extra: str) -> Process:
        name = f"{self.release}-{role}-{len(self.started)}"
        proc = Process(name, [str(self.python), *args], self.env(**extra),
                       self.tmp / f"{name}.log")
        self.started.append(proc)
        return proc

    def jobwarden(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), "-m", "jobwarden", *args], env=self.env(),
                              cwd=REPO, capture_output=True, text=True, timeout=300,
                              check=False)

    def worker(self, host: str, *extra: str, **env: str) -> Process:
        return self.start("worker", ["-m", "jobwarden", "worker", *WORKER_FLAGS, "--host", host,
                                     *extra], **env)

    def client(self, **env: str) -> Process:
        return self.start("client", ["-m", "tests.support.upgradejobs", "client"], **env)

    def holder(self) -> Process:
        return self.start("holder", ["-m", "tests.support.upgradejobs", "holder"])


class TickCaller:
    """POSTs /tick to a worker until stopped; records every answer."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TickCaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                connection.request("POST", "/tick?max_jobs=2",
                                   headers={"X-Jobwarden-Token": TOKEN})
                answer = connection.getresponse()
                self.answers.append((answer.status, json.loads(answer.read() or b"{}")))
            except OSError:
                continue  # not listening yet
            finally:
                connection.close()


@pytest.fixture(scope="module")
def previous() -> releases.Installed:
    return releases.install(releases.previous())


@pytest.fixture
def empty_dsn(pg_server: str) -> Iterator[str]:
    """A database with nothing in it: the previous release's migrate creates the schema."""
    with postgres.empty_database(pg_server, prefix="jw_upgrade") as dsn:
        yield dsn


def _one(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _ran(dsn: str, release: str | None = None) -> int:
    if release is None:
        return int(_one(dsn, "SELECT count(*) FROM public.audit WHERE event = 'ran'"))
    return int(_one(dsn, "SELECT count(*) FROM public.audit WHERE event = 'ran' AND detail = %s",
                    (release,)))


def _progress(dsn: str, what: str, count: Any, at_least: int, processes: list[Process],
              ) -> None:
    """Wait until ``count()`` reaches ``at_least``, failing at once if a process died."""
    def alive() -> None:
        for proc in processes:
            if not proc.alive():
                pytest.fail(f"{proc.name} exited {proc.proc.returncode} while waiting for "
                            f"{what}:\n{proc.text()[-3000:]}")

    wait_for(lambda: count() >= at_least, timeout=WAIT, interval=0.2, message=what, check=alive)


def _settled(dsn: str) -> bool:
    return int(_one(dsn, "SELECT count(*) FROM jobwarden.jobs WHERE status NOT IN "
                         "('completed', 'failed', 'cancelled', 'interrupted')")) == 0


def _assert_every_job_ended_once(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        statuses = dict(conn.execute(
            "SELECT status::text, count(*) FROM jobwarden.jobs GROUP BY 1").fetchall())
        runs = conn.execute(
            "SELECT j.id, count(a.id) FROM jobwarden.jobs j LEFT JOIN public.audit a "
            "ON a.job_id = j.id AND a.event = 'ran' GROUP BY j.id HAVING count(a.id) <> 1"
        ).fetchall()
        enqueued = {int(r[0]) for r in conn.execute(
            "SELECT detail FROM public.audit WHERE event = 'enqueued'").fetchall()}
        missing = enqueued - {int(r[0]) for r in conn.execute(
            "SELECT id FROM jobwarden.jobs").fetchall()}
        rolled_back = conn.execute(
            "SELECT count(*) FROM jobwarden.jobs WHERE data ? 'rolled_back'").fetchone()
        by_release = dict(conn.execute(
            "SELECT detail, count(*) FROM public.audit WHERE event = 'ran' GROUP BY 1"
        ).fetchall())
        held = conn.execute(
            "SELECT name, slot, owner FROM jobwarden.leases "
            "WHERE owner IS NOT NULL AND expires_at > now()").fetchall()
    assert set(statuses) == {"completed"}, statuses
    assert runs == [], f"jobs that did not run exactly once (id, runs): {runs[:20]}"
    assert not missing, f"enqueued but not in the jobs table: {sorted(missing)[:20]}"
    assert rolled_back == (0,)
    assert held == [], f"leases left held: {held}"
    return {"jobs": sum(statuses.values()), **{f"ran_by_{k}": v for k, v in by_release.items()}}


def _assert_clean_exit(proc: Process) -> None:
    code = proc.stop()
    assert code == 0, f"{proc.name} exited {code}:\n{proc.text()[-3000:]}"
    assert proc.errors() == [], f"{proc.name} logged errors: {proc.errors()[:10]}"


def test_the_previous_release_runs_beside_head_through_the_migration_and_after_rollback(
        previous: releases.Installed, empty_dsn: str, tmp_path: Path) -> None:
    started = time.monotonic()
    old = Stack(empty_dsn, tmp_path, previous.release.version, previous.python)
    new = Stack(empty_dsn, tmp_path, "head", Path(sys.executable))
    figures: dict[str, Any] = {"previous": previous.release.version}
    migrated = old.jobwarden("migrate")
    assert migrated.returncode == 0, migrated.stderr
    try:
        # The previous release at its own schema level.
        port = free_port()
        old_worker = old.worker("old-host", "--http-port", str(port),
                                JOBWARDEN_TICK_TOKEN=TOKEN)
        old_client = old.client(UPGRADE_DEFINE_SCHEDULE="1")
        old_holder = old.holder()
        olds = [old_worker, old_client, old_holder]
        with TickCaller(port) as ticks:
            _progress(empty_dsn, "the old worker's first jobs", lambda: _ran(empty_dsn),
                      STAGE_JOBS, olds)

            # HEAD's migrate while they run.
            migrated = new.jobwarden("migrate", "--json")
            assert migrated.returncode == 0, migrated.stderr
            figures["migrations_applied"] = json.loads(migrated.stdout)["applied"]
            before = _ran(empty_dsn)
            _progress(empty_dsn, "old jobs after the migration", lambda: _ran(empty_dsn),
                      before + STAGE_JOBS, olds)
            _progress(empty_dsn, "a scheduled job after the migration", lambda: int(_one(
                empty_dsn, "SELECT count(*) FROM jobwarden.jobs WHERE job_class LIKE "
                "'%%Scheduled' AND status = 'completed' AND finished_at > (SELECT max(applied_at) "
                "FROM jobwarden.schema_migrations)")), 1, olds)

            # HEAD's worker and client beside them.
            new_worker = new.worker("new-host")
            new_client = new.client()
            news = [new_worker, new_client]
            _progress(empty_dsn, "jobs run by HEAD's worker", lambda: _ran(
                empty_dsn, _head_release()), STAGE_JOBS, olds + news)
            ticked = len(ticks.answers)
            # Both releases are listed as running: the old worker recorded none.
            status = new.jobwarden("status", "--json")
            assert status.returncode == 0, status.stderr
            running = {(r["release"], r["workers"]) for r in json.loads(status.stdout)["versions"]}
            assert running == {(None, 1), (_head_release(), 1)}, running
        # The old ones go (the tick caller has stopped calling the old worker).
        for proc in (old_client, old_holder, old_worker):
            _assert_clean_exit(proc)
        figures["old_worker_drain_seconds"] = round(old_worker.stopped_in or 0, 2)
        assert ticked > 0 and all(status == 200 and answer.get("ok")
                                  for status, answer in ticks.answers), ticks.answers[:10]
        figures["ticks"] = ticked
        holder = old_holder.summary()
        assert holder["failures"] == 0 and holder["released"] == holder["taken"] > 0, holder
        figures["old_lease_pairs"] = holder["taken"]
        figures["old_enqueued"] = old_client.summary()["enqueued"]

        # Everything settles on HEAD: the schedule is suspended, the client stopped.
        _suspend_schedule(new)
        _assert_clean_exit(new_client)
        figures["head_enqueued"] = new_client.summary()["enqueued"]
        _progress(empty_dsn, "every job finished", lambda: _settled(empty_dsn), True,
                  [new_worker])
        _assert_clean_exit(new_worker)
        figures["upgrade"] = _assert_every_job_ended_once(empty_dsn)

        # Rollback: HEAD's processes are gone, the schema stays HEAD's.
        # The rolled-back operator runs its own migrate at start: nothing to do, no error.
        remigrated = old.jobwarden("migrate")
        assert remigrated.returncode == 0, remigrated.stderr
        assert "up to date" in remigrated.stdout
        resumed = old.jobwarden("schedules", "resume", upgradejobs.SCHEDULE)
        assert resumed.returncode == 0, resumed.stderr
        back_worker = old.worker("rolled-back-host")
        back_client = old.client()
        back_holder = old.holder()
        backs = [back_worker, back_client, back_holder]
        before = _ran(empty_dsn)
        _progress(empty_dsn, "jobs run after the rollback", lambda: _ran(empty_dsn),
                  before + STAGE_JOBS, backs)
        _progress(empty_dsn, "a scheduled job after the rollback", lambda: int(_one(
            empty_dsn, "SELECT count(*) FROM jobwarden.jobs WHERE job_class LIKE '%%Scheduled' "
            "AND status = 'completed' AND claimed_by = 'rolled-back-host'")), 1, backs)
        _suspend_schedule(old)
        for proc in (back_client, back_holder):
            _assert_clean_exit(proc)
        _progress(empty_dsn, "every job finished after the rollback",
                  lambda: _settled(empty_dsn), True, [back_worker])
        _assert_clean_exit(back_worker)
        holder = back_holder.summary()
        assert holder["failures"] == 0 and holder["released"] == holder["taken"] > 0, holder
        figures["rollback"] = _assert_every_job_ended_once(empty_dsn)
        figures["rollback_lease_pairs"] = holder["taken"]
        figures["seconds"] = round(time.monotonic() - started, 1)
        print("mixed-version figures:", json.dumps(figures, sort_keys=True))
    finally:
        for proc in old.started + new.started:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    proc.proc.kill()
                proc.proc.wait(timeout=30)
        for proc in old.started + new.started:
            print(f"----- {proc.name}\n{proc.text()[-2500:]}")


def _head_release() -> str:
    from jobwarden import version

    return version.VERSION


def _suspend_schedule(stack: Stack) -> None:
    out = stack.jobwarden("schedules", "suspend", upgradejobs.SCHEDULE)
    assert out.returncode == 0, out.stderr
