"""Per-resource series: readiness read from a watched object's status, removed at deletion.

Issue 27: no alert fired on a resource that was ``Ready=False`` (``InvalidSpec``), and
per-resource series (``jobwarden_pod_runs_total{resource}``) were never removed, so
one-shot ExclusiveJobs grew the scrape without bound.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from jobwarden.controller.kube import resource_metrics
from jobwarden.observability import metrics
from jobwarden.schedules.periods import period_seconds


def body(kind: str, name: str, *conditions: tuple[str, str, str],
         **spec: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"namespace": "app", "name": name}, "spec": spec,
            "status": {"conditions": [{"type": t, "status": s, "reason": r}
                                      for t, s, r in conditions]}}


def ready(kind: str, name: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("jobwarden_resource_ready",
                                             {"kind": kind, "resource": f"app/{name}"})


@pytest.mark.parametrize(("kind", "conditions", "expected"), [
    ("JobSchedule", [("Ready", "True", "Synced")], 1.0),
    ("JobSchedule", [("Ready", "False", "InvalidSpec")], 0.0),
    ("ExclusiveJob", [("Ready", "Unknown", "JobMissing")], None),
    ("ExclusiveJob", [], None),
    ("WorkerPool", [("Available", "True", "MinimumReplicasAvailable"),
                    ("Progressing", "False", "NewReplicasAvailable")], 1.0),
    ("WorkerPool", [("Available", "True", "MinimumReplicasAvailable"),
                    ("DSNSecretReady", "False", "SecretNotFound")], 0.0),
    ("WorkerPool", [("Progressing", "False", "InvalidSpec")], 0.0),
    ("WorkerPool", [("Progressing", "False", "ProgressDeadlineExceeded"),
                    ("Available", "True", "MinimumReplicasAvailable")], 0.0),
    ("WorkerPool", [("ReplicaFailure", "True", "FailedCreate")], 0.0),
    ("WorkerPool", [("Available", "False", "MinimumReplicasUnavailable")], 0.0),
    ("WorkerPool", [("Progressing", "True", "ScalingUp")], None),
])
def test_readiness_follows_the_status_the_api_server_holds(
        kind: str, conditions: list[tuple[str, str, str]], expected: float | None) -> None:
    resource_metrics.observe(kind, body(kind, f"r-{kind}", *conditions))
    assert ready(kind, f"r-{kind}") == expected
    resource_metrics.forget(kind, body(kind, f"r-{kind}"))


def test_a_ready_resource_that_becomes_unknown_loses_its_series() -> None:
    resource_metrics.observe("JobSchedule", body("JobSchedule", "flip", ("Ready", "True", "S")))
    assert ready("JobSchedule", "flip") == 1.0
    resource_metrics.observe("JobSchedule", body("JobSchedule", "flip"))
    assert ready("JobSchedule", "flip") is None


def test_a_deleted_resource_leaves_no_series_behind() -> None:
    pool = body("WorkerPool", "gone", ("Available", "True", "M"), drainTimeoutSeconds=86400)
    resource_metrics.observe("WorkerPool", pool)
    metrics.prime_pool("gone")
    metrics.ROLLOUT_DURATION.labels("gone").observe(3)
    job = body("ExclusiveJob", "once", ("Ready", "True", "Enqueued"))
    resource_metrics.observe("ExclusiveJob", job)
    metrics.prime_pod_runs("ExclusiveJob", "app/once")
    metrics.POD_RUNS.labels("ExclusiveJob", "app/once").inc()
    schedule = body("JobSchedule", "nightly", ("Ready", "True", "Synced"))
    resource_metrics.observe("JobSchedule", schedule)
    metrics.prime_schedule("app/nightly")
    text = _scrape()
    for series in ('jobwarden_pool_drain_timeout_seconds{pool="gone"} 86400.0',
                   'jobwarden_pod_runs_total{kind="ExclusiveJob",resource="app/once"} 1.0',
                   'jobwarden_rollout_reaped_jobs_total{pool="gone"} 0.0',
                   'jobwarden_schedule_slots_missed_total{schedule="app/nightly"} 0.0'):
        assert series in text

    for kind, deleted in (("WorkerPool", pool), ("ExclusiveJob", job),
                          ("JobSchedule", schedule)):
        resource_metrics.forget(kind, deleted)
    text = _scrape()
    # The deleted resources' own labels: a schedule named "gone" by another test in this
    # process (``schedule="gone"``) is not this pool's.
    assert [line for line in text.splitlines()
            if not line.startswith("#") and any(
                mark in line for mark in ('pool="gone"', '"app/gone"', '"app/once"',
                                          '"app/nightly"'))] == []
    # Created again under the same name: primed again, at 0.
    metrics.prime_pod_runs("ExclusiveJob", "app/once")
    assert 'jobwarden_pod_runs_total{kind="ExclusiveJob",resource="app/once"} 0.0' in _scrape()
    metrics.forget_resource("ExclusiveJob", "app", "once")


def _scrape() -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.REGISTRY).decode()  # type: ignore[arg-type]


@pytest.mark.parametrize(("expression", "seconds"), [
    ("@every 5m", 300),
    ("0 * * * *", 3600),
    ("@monthly", 31 * 86400),
    ("CRON_TZ=Europe/Berlin 0 9 * * 1-5", 3 * 86400),
])
def test_a_schedule_period_is_its_longest_gap_between_slots(expression: str,
                                                            seconds: float) -> None:
    now = dt.datetime(2030, 1, 7, 12, tzinfo=dt.UTC)
    assert period_seconds(expression, now=now) == seconds


def test_an_expression_this_release_cannot_read_has_no_period() -> None:
    assert period_seconds("every fortnight-ish") is None
