"""Fixtures shared by every test tier: real PostgreSQL, per-test databases, workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.assembly import build_worker
from jobwarden.db.database import Database
from jobwarden.settings import WorkerSettings
from jobwarden.worker.worker import Worker
from tests.support import postgres, testjobs

REPO = Path(__file__).resolve().parent.parent

#: The emulated Kubernetes API's fixtures (kube_api, kube_api_factory, kube_crd_paths,
#: kubectl), registered once for every tier (docs/testing-kubernetes.md), and CI's rule
#: that a tier which skips fails (tests/support/ci_skips.py), the timeout alarm held off
#: while a report is built (tests/support/timeoutguard.py), and xdist's cap on control-plane
#: tests at once (tests/support/planecap.py).
pytest_plugins = ["tests.support.kube.plugin", "tests.support.ci_skips",
                  "tests.support.timeoutguard", "tests.support.planecap"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs PostgreSQL ``db``, by what it uses, not by hand.

    All database fixtures (``dsn``, ``db``, ``client``, ``start_worker``, the
    operator's and the e2e tier's) reach the server through ``pg_server``, so a
    test whose fixture closure contains it needs a database; ``pytest -m "not db"``
    runs the others (parsing, planning, specs, layering, the emulated Kubernetes
    API's own tests) in seconds.
    """
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()) or _starts_own_server(item):
            item.add_marker(pytest.mark.db)
        if _cost_class(item) <= 1:
            item.add_marker(pytest.mark.plane)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(PLANE_TIMEOUT))
    items.sort(key=_cost_class)


#: The hang bound of a test that starts a control plane (pyproject's 300 s is the rest's):
#: on a machine with ~40% of its CPU stolen such tests took 170-280 s, and their setup
#: (planes, installs) counts too (2026-12-02, docs/testing.md).
PLANE_TIMEOUT = 900


#: Fixtures that start another control plane of their own (tests/cluster): the longest tests.
_EXTRA_PLANES = frozenset({"second_plane", "lifecycle_plane", "own_plane"})
#: Fixtures that start real processes (the operator, workers, the emulator tier's cluster).
_PROCESSES = frozenset({"start_operator", "spawn_worker", "cluster"})


def _cost_class(item: pytest.Item) -> int:
    """Longest first (a stable sort: the rest of the order is the collection's).

    With xdist a few long tests handed out last make a tail during which the other
    workers idle: the whole run then lasts as long as the worker that got them. So the
    tests that start control planes (tests/cluster: 20-120 s each) go out first, then those
    that start processes or are marked ``slow``, then the many short ones, and
    :func:`pytest_configure` has xdist hand tests out one at a time, so that the next one
    goes to whichever worker is free (longest-first list scheduling).
    """
    names = set(getattr(item, "fixturenames", ()))
    if names & _EXTRA_PLANES:
        return 0
    if "control_plane" in names or "kube_tools_dir" in names:  # the last: a bench's own plane
        return 1
    if names & _PROCESSES or item.get_closest_marker("slow") is not None:
        return 2
    return 3


def pytest_configure(config: pytest.Config) -> None:
    """xdist's ``load`` mode hands each worker a contiguous quarter of its share up front
    (117 tests of 1,414 at -n 3) and refills in chunks of up to half the rest: the whole
    real-cluster tier once went to one worker in one chunk, which then ran it alone for
    most of the run. One test at a time (``--maxschedchunk 1``, unless given) keeps every
    worker busy until the end; the cost is one message per test."""
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def _starts_own_server(item: pytest.Item) -> bool:
    """A fault test that starts a private PostgreSQL (tests/support/postgres) needs one too."""
    module = getattr(item, "module", None)
    return module is not None and any(
        getattr(value, "__module__", None) == postgres.__name__ or value is postgres
        for value in vars(module).values())


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    dsn, embedded = postgres.server_dsn()
    yield dsn
    if embedded is not None:
        embedded.close()


@pytest.fixture(scope="session")
def database_factory(pg_server: str, worker_id: str) -> Iterator[postgres.DatabaseFactory]:
    factory = postgres.DatabaseFactory(pg_server, tag=worker_id.replace("gw", "w"))
    with psycopg.connect(postgres.with_database(pg_server, factory.template),
                         autocommit=True) as conn:
        conn.execute(testjobs.AUDIT_DDL)
    yield factory
    factory.close()


@pytest.fixture
def dsn(database_factory: postgres.DatabaseFactory,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    created = database_factory.create()
    monkeypatch.setenv("JOBWARDEN_TEST_AUDIT_DSN", created)
    yield created
    database_factory.drop(created)


@pytest.fixture
def db(dsn: str) -> Iterator[Database]:
    database = Database(dsn, min_size=1, max_size=4)
    yield database
    database.close()


@pytest.fixture
def client(db: Database) -> Client:
    return Client(database=db)


def audit_rows(dsn: str, event: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if event is None:
            return conn.execute(
                "SELECT job_id, attempt, pid, event, detail FROM public.audit ORDER BY id"
            ).fetchall()
        return conn.execute(
            "SELECT job_id, attempt, pid, event, detail FROM public.audit WHERE event = %s "
            "ORDER BY id", (event,)).fetchall()


FAST = dict(poll_interval=0.05, heartbeat_interval=0.2, heartbeat_grace=1.5, reap_interval=0.2,
            shutdown_grace=5.0)


@pytest.fixture
def start_worker(dsn: str) -> Iterator[Callable[..., Worker]]:
    """Start in-process workers with fast test timings; all are stopped at teardown."""
    started: list[tuple[Worker, Database]] = []

    def start(**overrides: Any) -> Worker:
        options: dict[str, Any] = {**FAST, "host": f"test-host-{len(started)}", **overrides}
        database = Database(dsn, min_size=1, max_size=options.get("concurrency", 10) + 4)
        worker = build_worker(database, WorkerSettings(**options))
        worker.start()
        started.append((worker, database))
        return worker

    yield start
    for worker, database in started:
        worker.stop(timeout=5)
        database.close()


def worker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "jobwarden", "worker", "--app", "tests.support.testjobs",
            "--poll-interval", "0.05", "--heartbeat-interval", "0.2",
            "--heartbeat-grace", "1.5", "--reap-interval", "0.2", *args]


@pytest.fixture
def spawn_worker(dsn: str, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start real `jobwarden worker` processes; any left are killed at teardown.

    Each process logs to ``worker-N.log`` in the test's tmp_path; the logs are
    printed at teardown (pytest shows them for failed tests).
    """
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        full_env = {**os.environ, "JOBWARDEN_DSN": dsn, "JOBWARDEN_TEST_AUDIT_DSN": dsn,
                    "PYTHONPATH": str(REPO), **(env or {})}
        log = tmp_path / f"worker-{len(procs)}.log"
        logs.append(log)
        with open(log, "wb") as handle:
            proc = subprocess.Popen(worker_command(*args), env=full_env, cwd=REPO,
                                    stdout=handle, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield spawn
    for log in logs:
        print(f"----- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
