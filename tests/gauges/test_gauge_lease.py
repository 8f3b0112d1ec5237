"""Queue gauges without the operator: one exporter per database, whichever process holds the lease.

The database-wide gauges (queue depth, oldest pending age, ...) must be exported
by exactly one process per database, so a ``sum()`` over pods never multiplies
them, and must not need the operator: a plain ``jobwarden worker`` deployment
alerts on backlog too. Two real worker processes and no operator are scraped
here; the in-process tests pin the exporter's rules (hold, stand by, hand over).
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Callable

import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from jobwarden.maintenance.looping import TaskLoop
from jobwarden.observability import metrics
from tests.support.ports import free_port
from tests.support.waiting import wait_for

DEPTH = re.compile(r'^jobwarden_queue_depth\{queue="backlog",status="pending"\} (\S+)$', re.M)
OLDEST = re.compile(r'^jobwarden_queue_oldest_pending_seconds\{queue="backlog"\} (\S+)$', re.M)


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _depth(body: str | None) -> float | None:
    found = DEPTH.search(body or "")
    return float(found.group(1)) if found else None


def _holder(db: Database) -> str | None:
    held = [lease for lease in db.leases.list(prefix=gauges.LEASE_NAME) if lease.owner]
    assert len(held) <= 1
    return held[0].holder_host if held else None


@pytest.mark.slow
def test_two_workers_without_an_operator_export_the_queue_gauges_exactly_once(
        client: jobwarden.Client, db: Database,
        spawn_worker: Callable[..., subprocess.Popen[bytes]]) -> None:
    # A backlog nobody claims: the workers only listen to another queue.
    client.enqueue_many("tests.support.testjobs:Noop", [{"n": n} for n in range(7)],
                        queue="backlog", check=False)
    ports = {"gw-a": free_port(), "gw-b": free_port()}
    procs = {host: spawn_worker("--host", host, "--queues", "elsewhere", "--http-port",
                                str(port), "--gauge-interval", "0.3")
             for host, port in ports.items()}

    def exporters() -> dict[str, float] | None:
        bodies = {host: _scrape(port) for host, port in ports.items()}
        if any(body is None or "jobwarden_worker_slots" not in body
               for body in bodies.values()):
            return None  # both must serve before "exactly one" means anything
        found = {host: _depth(body) for host, body in bodies.items()}
        return {host: value for host, value in found.items() if value is not None} or None

    exporting = wait_for(exporters, timeout=60, message="a worker exports the queue gauges")
    assert list(exporting.values()) == [7.0]
    (first,) = exporting
    assert _holder(db) == first
    # It stays one exporter over many passes of both workers, with the right figures.
    for _ in range(5):
        wait_for(lambda: (_scrape(ports[first]) or "").count("\n") > 0, timeout=10,
                 message="scrape")
        assert exporters() == {first: 7.0}
    body = _scrape(ports[first]) or ""
    oldest = OLDEST.search(body)
    assert oldest is not None and float(oldest.group(1)) >= 0
    assert 'jobwarden_queue_depth{queue="backlog",status="failed"} 0.0' in body
    client.enqueue("tests.support.testjobs:Noop", queue="backlog", check=False)
    wait_for(lambda: exporters() == {first: 8.0}, timeout=30, message="the gauge follows")

    # The exporter stops: it releases the lease and the other worker takes over.
    other = next(host for host in ports if host != first)
    procs[first].send_signal(signal.SIGTERM)
    assert procs[first].wait(timeout=60) == 0
    wait_for(lambda: _depth(_scrape(ports[other])) == 8.0, timeout=30,
             message="the other worker took over the gauges")
    assert _holder(db) == other


def test_an_exporter_holds_the_lease_and_a_standby_exports_nothing(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    client.enqueue("tests.support.testjobs:Noop", queue="backlog", check=False)
    other_db = Database(dsn, min_size=1, max_size=2)
    try:
        a = gauges.GaugeExporter(db, owner="a", host="host-a", interval=1)
        b = gauges.GaugeExporter(other_db, owner="b", host="host-b", interval=1)
        loop = TaskLoop([], stop=threading.Event())
        loop.run_once(a.task)
        sample = metrics.REGISTRY.get_sample_value
        assert sample("jobwarden_queue_depth", {"queue": "backlog", "status": "pending"}) == 1
        loop.run_once(b.task)  # standby: it exported nothing, so it removes nothing
        assert a.lease.held and not b.lease.held and not b.gauges.exporting
        assert sample("jobwarden_queue_depth", {"queue": "backlog", "status": "pending"}) == 1
        assert _holder(db) == "host-a"
        a.stop()  # releases and removes its gauges at once
        assert sample("jobwarden_queue_depth", {"queue": "backlog", "status": "pending"}) is None
        loop.run_once(b.task)
        assert b.lease.held and _holder(db) == "host-b"
        assert sample("jobwarden_queue_depth", {"queue": "backlog", "status": "pending"}) == 1
        loop.run_once(a.task)  # stopped: never competes again
        assert not a.lease.held
        b.stop()
    finally:
        other_db.close()


def test_a_worker_without_an_http_port_does_not_compete(db: Database) -> None:
    from jobwarden.assembly import build_worker
    from jobwarden.extensions.gauges import GaugeExtension
    from jobwarden.settings import WorkerSettings

    silent = build_worker(db, WorkerSettings(host="silent"))
    assert silent.extension(GaugeExtension) is None
    served = build_worker(db, WorkerSettings(host="served", http_port=free_port()))
    assert served.extension(GaugeExtension) is not None
    off = build_worker(db, WorkerSettings(host="off", http_port=free_port(), gauge_interval=0))
    assert off.extension(GaugeExtension) is None
