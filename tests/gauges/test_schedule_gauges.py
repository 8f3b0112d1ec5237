"""The schedule gauges the alert rules read, from the real database (issue 27)."""

from __future__ import annotations

import jobwarden
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from jobwarden.observability import metrics
from jobwarden.schedules.periods import period_seconds
from tests.support import testjobs


def value(name: str, schedule: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"schedule": schedule})


def test_suspension_period_and_time_without_success_are_exported(
        db: Database, client: jobwarden.Client) -> None:
    client.schedules.upsert("g-hourly", cron="0 * * * *", job_class=testjobs.Noop)
    client.schedules.upsert("g-paused", interval="5m", job_class=testjobs.Noop,
                            suspended=True)
    exporter = gauges.DatabaseGauges(db, period_of=period_seconds)
    exporter()
    assert value("jobwarden_schedule_period_seconds", "g-hourly") == 3600
    assert value("jobwarden_schedule_suspended", "g-hourly") == 0
    assert value("jobwarden_schedule_suspended", "g-paused") == 1
    assert value("jobwarden_schedule_seconds_without_success", "g-paused") == 0
    without = value("jobwarden_schedule_seconds_without_success", "g-hourly")
    assert without is not None and 0 <= without < 60
    exporter.clear()


def test_a_deleted_schedule_leaves_no_series(db: Database, client: jobwarden.Client) -> None:
    client.schedules.upsert("g-gone", interval="5m", job_class=testjobs.Noop)
    exporter = gauges.DatabaseGauges(db, period_of=period_seconds)
    exporter()
    assert value("jobwarden_schedule_slots_missed_total", "g-gone") == 0
    assert value("jobwarden_schedule_period_seconds", "g-gone") == 300
    client.schedules.delete("g-gone")
    exporter()
    for name in ("jobwarden_schedule_slots_missed_total", "jobwarden_schedule_period_seconds",
                 "jobwarden_schedule_suspended", "jobwarden_schedule_seconds_since_success"):
        assert value(name, "g-gone") is None, name
    exporter.clear()
