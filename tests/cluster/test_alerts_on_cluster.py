"""The alerts a run provokes fire on a real Prometheus with the chart's rules; the
others stay silent.

The run on the real control plane: a worker pod whose job's key lease is taken
over mid-run (``JobwardenLeaseLost``), and a host drained by hand (``jobwarden
drain`` without an expiry: nothing ends it) while it runs a long job, longer
than its pool's own ``drainTimeoutSeconds`` (``JobwardenDrainStuck``: the
operator exports the pool's timeout, the worker how long it has drained). The
failing-jobs alert is provoked in test_prometheus_scrape.py. Rule windows and
timeouts are shortened through chart values only; every other alert is
evaluated on the same series and must never have fired during the run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cluster.conftest import RealCluster, secret, worker_pool
from tests.cluster.promserver import chart_rules, pod_targets, ready, start_prometheus
from tests.conftest import audit_rows
from tests.support import leasejobs, testjobs

pytestmark = [pytest.mark.realkube, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus missing (Debian package prometheus)")]

#: The pool's drain timeout: short, so that a drain nothing ends outlasts it in the run.
POOL_DRAIN_TIMEOUT = 10
RULES = {"prometheusRule": {"enabled": True, "operatorJob": "operator", "rules": {
    "leaseLost": {"window": "2m"},
    "drainStuck": {"marginSeconds": 5, "window": "1m"},
    "jobsFailing": {"window": "1m", "for": "0s", "minFailures": 2},
    "jobsReaped": {"window": "2m"},
    # Not 0s: absent(up) holds for the second before Prometheus' first scrape.
    "operatorDown": {"for": "20s"},
    "queueWaitHigh": {"for": "0s"}, "scheduleNoSuccess": {"for": "0s"}}}}
PROVOKED = {"JobwardenLeaseLost", "JobwardenDrainStuck"}


def test_a_lost_lease_and_an_overlong_drain_fire_and_nothing_else_does(
        realkube: RealCluster, tmp_path: Path):
    ns = realkube.namespace
    realkube.install()
    realkube.api.create(secret("db", ns, realkube.dsn))
    realkube.api.create(worker_pool("workers", ns, "db", drainTimeoutSeconds=POOL_DRAIN_TIMEOUT,
                                    apps=["tests.support.testjobs", "tests.support.leasejobs"]))
    realkube.wait(lambda: ((realkube.api.get("workerpools", "workers", ns) or {})
                           .get("status") or {}).get("readyReplicas") == 1,
                  timeout=120, what="a ready worker")
    jobs = pod_targets(realkube)
    assert jobs["operator"] and jobs["workers"], jobs
    rules = chart_rules(RULES, ns, tmp_path / "rules.yaml")
    process, prometheus = start_prometheus(tmp_path, jobs, rules)
    try:
        realkube.wait(lambda: ready(prometheus), timeout=60, what="Prometheus ready")
        # The primed counter scraped before the event: the event is an increase.
        lost = 'jobwarden_lease_lost_total{kind="key"}'
        realkube.wait(lambda: prometheus.query(f"{lost} offset 5s"), timeout=60,
                      what=f"{lost} scraped before the event")
        assert not prometheus.firing("JobwardenLeaseLost")

        stolen = realkube.client.enqueue(leasejobs.TakenOver).id
        realkube.wait(lambda: realkube.client.job(stolen).status.terminal, timeout=60,
                      what="the TakenOver job to finish")
        fired = realkube.wait(lambda: prometheus.firing("JobwardenLeaseLost"), timeout=90,
                              what="JobwardenLeaseLost to fire")
        assert [a["kind"] for a in fired] == ["key"], fired

        # A long job, then a drain by hand that nothing ends: stuck past the pool's timeout.
        long = realkube.client.enqueue(testjobs.Sleepy, {"seconds": 90}).id
        realkube.wait(lambda: [r for r in audit_rows(realkube.dsn, "start") if r[0] == long],
                      timeout=60, what="the long job to start")
        (pod,) = [p["metadata"]["name"] for p in realkube.pods("jobwarden.io/pool=workers")]
        timeout = 'jobwarden_pool_drain_timeout_seconds{pool="workers"}'
        assert realkube.wait(lambda: prometheus.value(timeout), timeout=60,
                             what="the pool's drain timeout exported") == POOL_DRAIN_TIMEOUT
        assert not prometheus.firing("JobwardenDrainStuck")
        assert realkube.client.hosts.drain(host=pod, expires_in=0, reason="by hand") == [pod]
        stuck = realkube.wait(lambda: prometheus.firing("JobwardenDrainStuck"), timeout=120,
                              what="JobwardenDrainStuck to fire")
        assert {(a["pod"], a["pool"]) for a in stuck} == {(pod, "workers")}
        drained = prometheus.value(f'jobwarden_host_draining_seconds{{pod="{pod}"}}')
        assert drained is not None and drained > POOL_DRAIN_TIMEOUT + 5
        # Nothing cut the drain short: the job is still running while the alert fires.
        assert not realkube.client.job(long).status.terminal
        realkube.client.hosts.resume(host=pod)

        # Every alert that fired at any time during the run: only the provoked ones.
        ever = {r["metric"]["alertname"] for r in prometheus.query(
            'max_over_time(ALERTS{alertstate="firing"}[30m])')}
        assert ever == PROVOKED, ever
    finally:
        process.terminate()
        process.wait(timeout=20)
