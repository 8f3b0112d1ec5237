"""The schedule alerts on a real Prometheus, over a run of the real schedule code.

Issue 27: JobwardenScheduleNoSuccess paged suspended schedules and ``@monthly`` ones in
normal operation and reached an hourly schedule whose runs all failed only after ~22 h;
JobwardenScheduleSlotsMissed fired on every resume. Here four schedules run in one
worker on the real database, the database-wide gauges are exported as the gauge lease
holder exports them (:class:`jobwarden.maintenance.gauges.DatabaseGauges` with the schedules'
periods), and Prometheus evaluates the chart's rules (``for`` and windows shortened
through values only):

* ``failing``: every 2 s, every run fails -- fires after 3 periods without a success;
* ``paused``: the same, suspended -- silent;
* ``resumed``: suspended for more than 3 periods, then resumed, its runs succeed --
  neither alert fires (no missed slots counted, the time without success starts at the
  resume);
* ``monthly``: ``@monthly``, created now -- silent.

The rules' arithmetic for hours and months is in tests/cluster/alerts/alerts.test.yaml
(promtool); this is the same rules over the series the code really exports.
"""

from __future__ import annotations

import collections.abc
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import start_http_server

import jobwarden
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from jobwarden.observability import metrics
from jobwarden.schedules.periods import period_seconds
from jobwarden.worker.worker import Worker
from tests.chart.helmchart import manifests, values_of
from tests.monitoring import prometheus
from tests.monitoring.test_alerts_fire import _as_a_fresh_process
from tests.support import testjobs
from tests.support.ports import free_port
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(prometheus.BINARY is None,
                       reason="no prometheus binary (apt-get install prometheus)"),
]

ALERTS = ("JobwardenScheduleNoSuccess", "JobwardenScheduleSlotsMissed")


def rendered_rules() -> list[dict[str, Any]]:
    values = values_of("full-values.yaml") or {}
    values["prometheusRule"]["rules"] = {"scheduleNoSuccess": {"for": "0s"},
                                         "slotsMissed": {"window": "1m"}}
    (rule,) = [d for d in manifests(values) if d["kind"] == "PrometheusRule"]
    return list(rule["spec"]["groups"])


@pytest.fixture
def exported(db: Database) -> collections.abc.Iterator[int]:
    """This process's registry on a loopback port, the database-wide gauges set every
    0.2 s by the exporter the operator runs."""
    _as_a_fresh_process()
    exporter = gauges.DatabaseGauges(db, period_of=period_seconds)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            exporter()
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    port = free_port()
    server, http = start_http_server(port, addr="127.0.0.1", registry=metrics.REGISTRY)
    yield port
    stop.set()
    thread.join(timeout=10)
    server.shutdown()
    server.server_close()
    http.join(timeout=5)
    exporter.clear()


def test_no_success_fires_for_failing_runs_only_and_resume_misses_nothing(
        tmp_path: Path, exported: int, client: jobwarden.Client,
        start_worker: collections.abc.Callable[..., Worker]) -> None:
    schedules = client.schedules
    schedules.upsert("failing", interval="2s", job_class=testjobs.Boom)
    schedules.upsert("paused", interval="2s", job_class=testjobs.Boom, suspended=True)
    schedules.upsert("resumed", interval="2s", job_class=testjobs.Noop)
    schedules.suspend("resumed")
    schedules.upsert("monthly", cron="@monthly", job_class=testjobs.Noop)
    start_worker(queues=("default",), schedule_check_seconds=0.2)
    rules = prometheus.rules_file(rendered_rules(), tmp_path / "rules.yml")
    with prometheus.running(tmp_path, targets=[f"127.0.0.1:{exported}"], rules=rules) as prom:
        assert wait_for(lambda: prom.value(
            'jobwarden_schedule_period_seconds{schedule="monthly"}'), timeout=60,
            interval=0.5, message="the periods exported") >= 28 * 86400
        assert prom.value('jobwarden_schedule_suspended{schedule="paused"}') == 1
        missed = 'jobwarden_schedule_slots_missed_total{schedule="resumed"}'
        wait_for(lambda: prom.query(f"{missed} offset 10s"), timeout=60, interval=0.5,
                 message="the resumed schedule's missed slots scraped, 10 s before")

        # Suspended for 10 s (5 periods), then resumed: nothing missed, nothing stale.
        wait_for(lambda: client.schedules.resume("resumed") is not None, timeout=60)
        fired = wait_for(lambda: prom.firing("JobwardenScheduleNoSuccess"), timeout=90,
                         interval=0.5, message="JobwardenScheduleNoSuccess firing")
        assert [a["schedule"] for a in fired] == ["failing"]
        wait_for(lambda: (prom.value('jobwarden_schedule_seconds_since_success'
                                     '{schedule="resumed"}') or 99) < 5,
                 timeout=60, interval=0.5, message="the resumed schedule succeeding")
        assert prom.value(missed) == 0
        # Everything that fired at any time during the run: no success for the failing
        # schedule only, and nothing about the others. (A 2 s schedule on a loaded
        # machine may really miss a slot when a runner pass comes late: that is the
        # failing one's business, not the resume's.)
        ever = {(r["metric"]["alertname"], r["metric"].get("schedule")) for r in prom.query(
            'max_over_time(ALERTS{alertstate="firing"}[5m])')
            if r["metric"]["alertname"] in ALERTS}
        assert {s for a, s in ever if a == "JobwardenScheduleNoSuccess"} == {"failing"}
        assert {s for a, s in ever} <= {"failing"}, ever
