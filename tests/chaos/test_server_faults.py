"""Database restart and crash under load, on a private server (issue #12).

Three worker processes, never restarted, run 2,300 short jobs (a tenth of them
non-idempotent) while the test terminates every worker connection twice,
restarts the server (``pg_ctl restart -m fast``) and then SIGKILLs the
postmaster and starts it again on the same data. A lease holder renews a 12 s
lease every second throughout. Checks: every job ends in exactly one terminal
state (completed), no non-idempotent job started twice (idempotent claims
commit asynchronously, so the crash may re-run one of those, after it), the
lease holder was never told it lost a lease it still held, and claims resume
promptly after each outage (the figure is printed; the assertion only catches
the multi-second stall of defect 1).
"""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import jobwarden
from jobwarden import errors
from jobwarden.structs.states import JobStatus
from tests.support import chaosjobs
from tests.support.postgres import EmbeddedServer, private_server
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]

Spawn = Callable[..., subprocess.Popen[bytes]]
JOBS = 2300
#: Claims resumed 5-7 s after the server was back before the pool fix (issue #12);
#: measured since: well under 0.1 s. The bound only catches that regression; the
#: figure itself is printed (this test runs in the serial phase, alone).
RESUME_BOUND = 3.0
DOWN_SECONDS = 5.0


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with private_server() as own:
        yield own


def _done(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM jobwarden.jobs "
                           "WHERE status NOT IN ('pending', 'processing')").fetchone()
    return int(row[0]) if row else 0


def _first_claim_after(dsn: str, since: datetime.datetime, timeout: float) -> float:
    """Seconds from ``since`` (database clock) to the first claim made after it."""
    def first() -> float | None:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT extract(epoch FROM min(claimed_at) - %s) FROM "
                               "jobwarden.jobs WHERE claimed_at > %s", (since, since)).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    return float(wait_for(first, timeout=timeout, interval=0.05,
                          message="a claim after the server came back"))


def _server_clock(dsn: str) -> datetime.datetime:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


class Holder(threading.Thread):
    """Renews a 12 s lease every second; records what it was told."""

    def __init__(self, client: jobwarden.Client) -> None:
        super().__init__(daemon=True)
        self.lease = client.lease("chaos-holder", ttl=12).acquire()
        self.stop = threading.Event()
        self.renewed = self.unavailable = 0
        self.lost: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.lease.renew()
                self.renewed += 1
            except jobwarden.LeaseLost as exc:
                self.lost.append(str(exc))
                return
            except errors.DatabaseUnavailable:
                self.unavailable += 1


def test_restart_and_crash_under_load_lose_and_double_nothing(
        server: EmbeddedServer, spawn_worker: Spawn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = server.dsn
    runs = str(tmp_path / "runs")
    monkeypatch.setenv("JOBWARDEN_TEST_AUDIT_DSN", dsn)
    env = {"JOBWARDEN_DSN": dsn, "JOBWARDEN_TEST_AUDIT_DSN": dsn, "JOBWARDEN_TEST_RUNS_FILE": runs}
    with jobwarden.Client(dsn) as client:
        once = [r.id for r in client.enqueue_many(chaosjobs.StepOnce, [None] * (JOBS // 10))]
        every = once + [r.id for r in client.enqueue_many(chaosjobs.Step,
                                                          [None] * (JOBS - len(once)))]
        holder = Holder(client)
        holder.start()
        for n in range(3):
            spawn_worker("--host", f"w{n}", "--app", "tests.support.chaosjobs",
                         "--concurrency", "6", "--heartbeat-interval", "1",
                         "--heartbeat-grace", "20", "--reap-interval", "1", env=env)
        faults: list[str] = []
        recovery: list[tuple[str, float]] = []

        def at(fraction: float) -> None:
            wait_for(lambda: _done(dsn) >= fraction * JOBS, timeout=120,
                     message=f"{fraction:.0%} of the jobs done")

        for fraction in (0.15, 0.3):
            at(fraction)
            with psycopg.connect(dsn, autocommit=True) as conn:
                killed = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'jobwarden-worker%%'").fetchone()
            faults.append(f"terminated {killed[0] if killed else 0} worker connections")
        at(0.45)
        server.restart()
        back = _server_clock(dsn)
        faults.append("pg_ctl restart -m fast")
        recovery.append(("restart", _first_claim_after(dsn, back, 60)))
        at(0.65)
        server.crash()
        chaosjobs.mark_crash(runs)
        crashed = time.monotonic()
        # Fault injection, not a wait for a state: the server stays down a while, as
        # in the reported run (a 12 s lease renewed every second lapsed after 5 s).
        threading.Event().wait(DOWN_SECONDS)
        server.start()
        down = time.monotonic() - crashed
        back = _server_clock(dsn)
        faults.append(f"SIGKILL of the postmaster, restart on the same data ({down:.1f}s down)")
        recovery.append(("crash", _first_claim_after(dsn, back, 60)))

        wait_for(lambda: _done(dsn) >= JOBS, timeout=180, message="every job to finish")
        holder.stop.set()
        holder.join(10)
        statuses = {j.id: j.status for j in client.jobs(limit=JOBS + 10)}
        still_ours = client.db.leases.owner_of("chaos-holder") == holder.lease.owner
        released = holder.lease.release()
    started = chaosjobs.starts(runs)
    lost = [i for i in every if statuses.get(i) is not JobStatus.COMPLETED]
    doubled = sorted({i for i in started
                      if i != chaosjobs.CRASH_MARK and started.count(i) > 1})
    doubled_once = [i for i in doubled if i in set(once)]
    print(f"\nserver faults: {JOBS} jobs ({len(once)} non-idempotent), 3 workers never "
          f"restarted; faults: {'; '.join(faults)}")
    print("recovery (server accepting -> first claim): "
          + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in recovery)
          + f"; lost={len(lost)} doubled={len(doubled)} (non-idempotent {len(doubled_once)}); "
          f"lease renewals ok={holder.renewed} unavailable={holder.unavailable} "
          f"lost={len(holder.lost)}")
    assert lost == [], f"{len(lost)} jobs not completed: {lost[:10]}"
    # A non-idempotent job never starts twice. An idempotent one may, after the
    # crash only: claims holding only idempotent jobs commit asynchronously
    # (at-least-once, jobs.sql fragment_claim_rows), so a crash can forget one.
    assert doubled_once == [] and chaosjobs.crash_doubles(started) == []
    assert sorted(set(started) - {chaosjobs.CRASH_MARK}) == sorted(every)
    assert holder.lost == [] and still_ours and released is True
    assert all(seconds < RESUME_BOUND for _, seconds in recovery), recovery
