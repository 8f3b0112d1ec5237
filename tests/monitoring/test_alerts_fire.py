"""A real Prometheus scrapes a run in which each rare event happens once.

The contract (operator/jobwarden/observability/metrics.py, "Rare events"; docs/alerts.md):
every rare-event label set a process can know is exported at 0 before its
first event, so Prometheus sees the first event as an increase; and the alert
rules also catch a label set that is born at 1 (the operator reaping a job of a
class it never saw). Windows are shortened to 20 s through the chart's values
so the test can wait for the primed series to be older than a window.
"""

from __future__ import annotations

import collections.abc
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import start_http_server

import jobwarden
from jobwarden.db.database import Database
from jobwarden.maintenance import reaper
from jobwarden.observability import meters, metrics
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.chart.helmchart import manifests, values_of
from tests.conftest import audit_rows
from tests.monitoring import prometheus
from tests.support import leasejobs, testjobs
from tests.support.ports import free_port
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(prometheus.BINARY is None,
                       reason="no prometheus binary (apt-get install prometheus)"),
]

WINDOW = "20s"


def rendered_rules() -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    values = values_of("full-values.yaml") or {}
    values["prometheusRule"]["rules"] = {
        "leaseLost": {"window": WINDOW},
        "jobsReaped": {"window": WINDOW, "threshold": 1},
        "slotsMissed": {"window": WINDOW},
    }
    (rule,) = [d for d in manifests(values) if d["kind"] == "PrometheusRule"]
    return list(rule["spec"]["groups"])


def _as_a_fresh_process() -> None:
    """Put this process's jobwarden metrics back to what a process that just started has.

    pytest-xdist runs many tests in one process, and earlier ones lost leases,
    fenced writes and reaped jobs: their label sets sat in the registry at non-zero
    values, so the first scrape saw them born above 0 and JobwardenLeaseLost fired
    before this test's event ("silent before the event" then proved nothing).
    Every labelled series is dropped and the process-wide label sets primed at 0
    again, as at import; the worker this test starts primes its job classes.
    """
    for value in vars(metrics).values():
        if isinstance(value, meters.Family) and value._labelnames:
            value.clear()
    with metrics._primed_lock:
        metrics._primed.clear()
    metrics.prime_process()


@pytest.fixture
def exporter() -> collections.abc.Iterator[int]:
    """This process's jobwarden registry on a loopback port (what a worker pod serves),
    holding only what this test moves (see :func:`_as_a_fresh_process`)."""
    _as_a_fresh_process()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=metrics.REGISTRY)
    yield port
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_the_first_rare_event_after_a_start_is_an_increase_and_fires_its_alert(
        tmp_path: Path, exporter: int, client: jobwarden.Client, db: Database, dsn: str,
        start_worker: collections.abc.Callable[..., Worker]) -> None:
    start_worker(queues=("default",))  # primes the imported classes of queue default at 0
    busy = "tests.support.leasejobs:BusyOnce"
    rules = prometheus.rules_file(rendered_rules(), tmp_path / "rules.yml")
    with prometheus.running(tmp_path, targets=[f"127.0.0.1:{exporter}"], rules=rules) as prom:
        # Before any event: the series exist, at their current value, for longer than a window.
        for series in ('jobwarden_lease_lost_total{kind="lock"}',
                       f'jobwarden_jobs_deferred_total{{job_class="{busy}"}}',
                       f'jobwarden_jobs_skipped_total{{job_class="{busy}",reason="lease_busy"}}',
                       'jobwarden_jobs_skipped_total{job_class="tests.support.leasejobs:'
                       'SkipWhenBusy",reason="on_busy_skip"}',
                       'jobwarden_jobs_fenced_total{job_class="tests.support.testjobs:Sleepy",'
                       'operation="fail"}'):
            wait_for(lambda s=series: prom.query(f"{s} offset {WINDOW}"), timeout=120,
                     interval=0.5, message=f"{series} scraped for a window before any event")
        assert prom.firing("JobwardenLeaseLost") == []

        _lose_a_lease(client)
        held = db.leases.try_acquire(name="key:busy-key", owner="elsewhere", ttl_seconds=120,
                                     host="other-host")
        assert held.acquired
        deferred = client.enqueue(leasejobs.BusyOnce).id
        skipped = client.enqueue(leasejobs.SkipWhenBusy).id
        wait_for(lambda: client.job(deferred).deferrals >= 1, message="deferred")
        wait_for(lambda: client.job(skipped).status is JobStatus.CANCELLED
                 or client.job(skipped).status.terminal, message="skipped")
        _fence_a_running_job(client, dsn)
        orphan = _reap_a_job_nobody_here_knew(client, db)
        assert client.job(orphan).status is JobStatus.INTERRUPTED

        # Each event once: Prometheus sees an increase of the primed series ...
        for series in ('jobwarden_lease_lost_total{kind="lock"}',
                       f'jobwarden_jobs_deferred_total{{job_class="{busy}"}}',
                       f'jobwarden_jobs_skipped_total{{job_class="{busy}",reason="lease_busy"}}',
                       'jobwarden_jobs_skipped_total{job_class="tests.support.leasejobs:'
                       'SkipWhenBusy",reason="on_busy_skip"}',
                       'jobwarden_jobs_fenced_total{job_class="tests.support.testjobs:Sleepy",'
                       'operation="fail"}'):
            wait_for(lambda s=series: prom.query(f"increase({s}[{WINDOW}]) > 0"), timeout=60,
                     interval=0.5, message=f"an increase of {series}")
        # ... and the alerts fire, also for label sets born at 1 (the orphan queue).
        wait_for(lambda: {"kind": "lock"}.items() <= _one(prom.firing("JobwardenLeaseLost")),
                 timeout=60, interval=0.5, message="JobwardenLeaseLost firing")
        reaped = wait_for(lambda: [a for a in prom.firing("JobwardenJobsReaped")
                                   if a.get("queue") == "orphans"], timeout=60, interval=0.5,
                          message="JobwardenJobsReaped firing for the orphans queue")
        assert {a["outcome"] for a in reaped} == {"interrupted"}
        # The last sample scraped, even if a later scrape failed (a loaded machine's scrape
        # timeout marks the series stale, and an instant query then finds nothing).
        interrupted = prom.value(
            'sum(last_over_time(jobwarden_jobs_interrupted_total{queue="orphans"}[5m]))')
        assert interrupted == 1
        db.leases.release(name="key:busy-key", owner="elsewhere", token=held.token)


def _one(alerts: list[dict[str, str]]) -> collections.abc.ItemsView[str, str]:
    return alerts[0].items() if len(alerts) == 1 else {}.items()


def _lose_a_lease(client: jobwarden.Client) -> None:
    """A lease lapses, another owner takes it, the holder's renewal learns it lost."""
    lease = client.lease("monitored", ttl=30).acquire()
    lease.renew(ttl=0.1)
    wait_for(lambda: client.db.leases.owner_of("monitored") is None, message="lapsed")
    client.lease("monitored", ttl=30).acquire()
    with pytest.raises(jobwarden.LeaseLost):
        lease.renew()


def _fence_a_running_job(client: jobwarden.Client, dsn: str) -> None:
    """Another worker takes over a running claim: the first one's write is refused."""
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 30}).id
    wait_for(lambda: [r for r in audit_rows(dsn, "start") if r[0] == job_id],
             message="Sleepy started")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET claim_token = gen_random_uuid(), "
                     "claimed_by = 'other' WHERE id = %s", (job_id,))


def _reap_a_job_nobody_here_knew(client: jobwarden.Client, db: Database) -> int:
    """A worker elsewhere claimed a non-idempotent job of a queue this process never served
    and died; the reaper here interrupts it -- its label set is born at 1."""
    job_id = client.enqueue(testjobs.SleepyOnce, {"seconds": 1}, queue="orphans").id
    claimed = db.jobs.claim(host="gone", limit=1, grace_seconds=0.1, queues=["orphans"])
    assert [c.id for c in claimed] == [job_id]
    lock = threading.Lock()

    def reaped() -> bool:
        with lock:
            reaper.reap(db)
        return client.job(job_id).status is not JobStatus.PROCESSING

    wait_for(reaped, timeout=15, interval=0.1, message="the orphan reaped")
    return job_id
