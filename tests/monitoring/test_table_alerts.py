"""A real Prometheus fires the dead-tuple alerts on the gauge holder's table gauges (issue 16).

The process holding the gauge lease exports ``jobwarden_db_*`` from the real
server's statistics (:mod:`jobwarden.maintenance.gauges`); here that is this test process,
with a real table whose autovacuum is switched off and real dead tuples. The
chart's rules are rendered with ``for: 0s`` and a low dead-tuple count so the
test need not wait half an hour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from tests.chart.helmchart import manifests, values_of
from tests.monitoring import prometheus
from tests.monitoring.test_alerts_fire import exporter  # noqa: F401 (a fixture)
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(prometheus.BINARY is None,
                       reason="no prometheus binary (apt-get install prometheus)"),
]

DEAD = 5_000


def rendered_rules() -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    values = values_of("full-values.yaml") or {}
    values["prometheusRule"]["rules"] = {
        "autovacuumOff": {"for": "0s"},
        "deadTuples": {"for": "0s", "minDeadTuples": DEAD // 2, "ratio": 0.2},
    }
    (rule,) = [d for d in manifests(values) if d["kind"] == "PrometheusRule"]
    return list(rule["spec"]["groups"])


def test_autovacuum_off_and_dead_tuples_fire_their_alerts_and_resolve(
        tmp_path: Path, exporter: int, db: Database, dsn: str) -> None:  # noqa: F811
    exported = gauges.DatabaseGauges(db)
    exported()
    rules = prometheus.rules_file(rendered_rules(), tmp_path / "rules.yml")
    with prometheus.running(tmp_path, targets=[f"127.0.0.1:{exporter}"], rules=rules) as prom:
        wait_for(lambda: prom.query('jobwarden_db_autovacuum_enabled{table="jobs"} == 1'),
                 timeout=60, interval=0.5, message="the table gauges scraped")
        assert prom.firing("JobwardenAutovacuumOff") == []
        assert prom.firing("JobwardenDeadTuplesPilingUp") == []

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE jobwarden.jobs SET (autovacuum_enabled = false)")
            conn.execute("INSERT INTO jobwarden.jobs (job_class) "
                         "SELECT 'x:Y' FROM generate_series(1, %s)", (DEAD,))
            conn.execute("DELETE FROM jobwarden.jobs")
            conn.execute("SELECT pg_stat_force_next_flush()")

        def dead_counted() -> bool:
            exported()
            return bool(prom.query(f'jobwarden_db_dead_tuples{{table="jobs"}} >= {DEAD}'))

        wait_for(dead_counted, timeout=60, interval=0.5, message="the dead tuples scraped")
        wait_for(lambda: [a for a in prom.firing("JobwardenAutovacuumOff")
                          if a.get("table") == "jobs"], timeout=60, interval=0.5,
                 message="JobwardenAutovacuumOff firing for jobs")
        wait_for(lambda: [a for a in prom.firing("JobwardenDeadTuplesPilingUp")
                          if a.get("table") == "jobs"], timeout=60, interval=0.5,
                 message="JobwardenDeadTuplesPilingUp firing for jobs")
        assert {a["table"] for a in prom.firing("JobwardenAutovacuumOff")} == {"jobs"}

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE jobwarden.jobs RESET (autovacuum_enabled)")
            conn.execute("VACUUM jobwarden.jobs")

        def resolved() -> bool:
            exported()
            return not prom.firing("JobwardenAutovacuumOff") and not prom.firing(
                "JobwardenDeadTuplesPilingUp")

        wait_for(resolved, timeout=60, interval=0.5, message="both alerts resolved")
