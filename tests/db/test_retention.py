"""Retention of finished jobs (issue 16): by age and count, in batches, one deleter per
database, never fighting a schedule's history limits or a concurrent purge."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from jobwarden import errors
from jobwarden.api.client import Client
from jobwarden.db.database import Database
from jobwarden.maintenance import retention
from jobwarden.observability import metrics
from jobwarden.structs.maintenance import DAY, RetentionPolicy, RetentionRule
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.support.waiting import wait_for

NOOP = "tests.support.testjobs:Noop"


def finished(dsn: str, client: Client, status: str, ages: list[float], *,
             schedule: str | None = None) -> list[int]:
    """Jobs of ``status`` that finished ``ages`` seconds ago (one per age)."""
    ids = [r.id for r in client.enqueue_many(NOOP, [{"i": i} for i in range(len(ages))],
                                             check=False)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for job_id, age in zip(ids, ages, strict=True):
            conn.execute(
                "UPDATE jobwarden.jobs SET status = %s::jobwarden.job_status, "
                "finished_at = now() - make_interval(secs => %s), schedule_name = %s "
                "WHERE id = %s", (status, age, schedule, job_id))
    return ids


def remaining(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM jobwarden.jobs")}


def run(db: Database, policy: RetentionPolicy, *, batch: int = 1000) -> dict[str, int]:
    return retention.Retention(db, retention.RetentionSettings(policy=policy,
                                                               batch=batch)).run_pass()


def test_the_default_policy_keeps_completed_a_day_and_other_finished_rows_a_week() -> None:
    rules = {r.status: r for r in RetentionPolicy().rules}
    assert rules[JobStatus.COMPLETED].max_age == DAY
    for status in (JobStatus.FAILED, JobStatus.INTERRUPTED, JobStatus.CANCELLED):
        assert rules[status].max_age == 7 * DAY
    assert all(r.max_rows is None for r in rules.values())


def test_the_environment_changes_some_rules_and_keeps_the_others() -> None:
    policy = RetentionPolicy.parse("completed=6h/100, cancelled=off, failed=/5")
    rules = {r.status: r for r in policy.rules}
    assert (rules[JobStatus.COMPLETED].max_age, rules[JobStatus.COMPLETED].max_rows) == (
        6 * 3600, 100)
    assert not rules[JobStatus.CANCELLED].active
    assert (rules[JobStatus.FAILED].max_age, rules[JobStatus.FAILED].max_rows) == (None, 5)
    assert rules[JobStatus.INTERRUPTED].max_age == 7 * DAY
    assert not RetentionPolicy.parse("off").enabled


@pytest.mark.parametrize("text", ["pending=1d", "completed", "completed=-1d", "completed=1w",
                                  "completed=1d/x", "completed=/-3", "completed=", "failed=0"])
def test_a_bad_policy_is_one_configuration_error_naming_the_variable(text: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="JOBWARDEN_RETENTION"):
        retention.RetentionSettings.from_env({"JOBWARDEN_RETENTION": text})


def test_a_bad_interval_is_a_configuration_error() -> None:
    with pytest.raises(errors.ConfigurationError, match="JOBWARDEN_RETENTION_INTERVAL"):
        retention.RetentionSettings.from_env({"JOBWARDEN_RETENTION_INTERVAL": "soon"})
    assert not retention.RetentionSettings.from_env(
        {"JOBWARDEN_RETENTION_INTERVAL": "0"}).enabled


def test_rows_older_than_their_status_age_are_deleted_and_nothing_unfinished(
        db: Database, client: Client, dsn: str) -> None:
    old_done = finished(dsn, client, "completed", [2 * DAY, 1.5 * DAY])
    new_done = finished(dsn, client, "completed", [3600, 60])
    failed_recent = finished(dsn, client, "failed", [2 * DAY])  # a week for failed
    failed_old = finished(dsn, client, "failed", [8 * DAY])
    pending = [r.id for r in client.enqueue_many(NOOP, [{}, {}])]
    before = metrics.RETENTION_DELETED.labels("completed").get()

    deleted = run(db, RetentionPolicy())

    assert deleted == {"completed": 2, "failed": 1}
    assert remaining(dsn) == {*new_done, *failed_recent, *pending}
    assert not remaining(dsn) & {*old_done, *failed_old}
    assert metrics.RETENTION_DELETED.labels("completed").get() == before + 2


def test_a_count_rule_keeps_the_newest_rows_of_its_status(
        db: Database, client: Client, dsn: str) -> None:
    ages = [float(a) for a in range(100, 0, -10)]  # oldest first, all younger than a day
    ids = finished(dsn, client, "completed", ages)
    policy = RetentionPolicy(rules=(RetentionRule(status=JobStatus.COMPLETED, max_rows=3),))
    assert run(db, policy, batch=2) == {"completed": 7}  # several batches in one pass
    assert remaining(dsn) == set(ids[-3:])
    assert run(db, policy, batch=2) == {}


def test_a_schedules_history_limit_governs_its_jobs_not_the_age_rule(
        db: Database, client: Client, dsn: str) -> None:
    client.schedules.upsert("nightly", cron="0 3 * * *", job_class=NOOP)
    limited = finished(dsn, client, "completed", [3 * DAY, 2 * DAY], schedule="nightly")
    failed = finished(dsn, client, "failed", [9 * DAY], schedule="nightly")
    store = client.schedules
    assert store.trim_history("nightly", successful=5, failed=None) == 0

    run(db, RetentionPolicy())
    # The completed ones are the limit's (5 kept, 2 exist); the failed group has no
    # limit, so the age rule still applies to it.
    assert remaining(dsn) == set(limited)
    assert not remaining(dsn) & set(failed)

    store.trim_history("nightly", successful=None, failed=None)  # limits removed
    run(db, RetentionPolicy())
    assert remaining(dsn) == set()


def test_a_row_another_transaction_holds_is_skipped_not_waited_for(
        db: Database, client: Client, dsn: str) -> None:
    held, free = finished(dsn, client, "completed", [2 * DAY, 2 * DAY])
    with psycopg.connect(dsn) as other:
        other.execute("SELECT 1 FROM jobwarden.jobs WHERE id = %s FOR UPDATE", (held,))
        done = threading.Event()
        result: dict[str, int] = {}

        def pass_() -> None:
            result.update(run(db, RetentionPolicy()))
            done.set()

        thread = threading.Thread(target=pass_, daemon=True)
        thread.start()
        # Not a speed bound: a pass that waited for the lock would never finish
        # while this transaction stays open.
        assert done.wait(60), "the retention pass waited for a locked row"
        assert result == {"completed": 1}
        assert held in remaining(dsn) and free not in remaining(dsn)
    assert run(db, RetentionPolicy()) == {"completed": 1}
    assert remaining(dsn) == set()


def test_retention_and_a_manual_purge_delete_each_row_once(
        db: Database, client: Client, dsn: str) -> None:
    finished(dsn, client, "completed", [2 * DAY] * 300)
    counts: list[int] = []
    purge = threading.Thread(target=lambda: counts.append(
        client.db.jobs.purge(statuses=[JobStatus.COMPLETED], older_than_seconds=DAY,
                             batch=7)))
    purge.start()
    deleted = run(db, RetentionPolicy(), batch=5).get("completed", 0)
    purge.join(60)
    assert deleted + counts[0] == 300
    assert remaining(dsn) == set()


def test_one_process_per_database_holds_the_retention_lease(db: Database, dsn: str) -> None:
    other = Database(dsn, min_size=1, max_size=2)
    try:
        settings = retention.RetentionSettings(interval=30)
        first = retention.RetentionTask(db, settings, host="a")
        second = retention.RetentionTask(other, settings, host="b")
        assert first.gate() and not second.gate()
        assert first.gate()
        first.release()
        assert second.gate()
        second.release()
    finally:
        other.close()


def test_a_worker_runs_retention_under_the_shared_lease_and_releases_it(
        client: Client, dsn: str, monkeypatch: pytest.MonkeyPatch,
        start_worker: Callable[..., Worker]) -> None:
    monkeypatch.setenv("JOBWARDEN_RETENTION_INTERVAL", "0.2")
    monkeypatch.setenv("JOBWARDEN_RETENTION", "completed=1h")
    old = finished(dsn, client, "completed", [2 * 3600])
    young = finished(dsn, client, "completed", [60])
    worker = start_worker()
    wait_for(lambda: not remaining(dsn) & set(old), timeout=30,
             message="the worker's retention pass deleted the old row")
    assert set(young) <= remaining(dsn)
    [held] = client.db.leases.read(retention.LEASE_NAME)
    assert held.owner is not None and held.holder_host == worker.host
    worker.stop()
    [released] = client.db.leases.read(retention.LEASE_NAME)
    assert released.owner is None


def test_the_operator_offers_retention_under_the_lease_the_workers_share(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobwarden.controller import periodic
    from jobwarden.controller.app import build_runtime
    from jobwarden.controller.config import OperatorConfig

    monkeypatch.setenv("JOBWARDEN_RETENTION_INTERVAL", "45")
    loops, _ = periodic.loops(build_runtime(db, OperatorConfig(pod_name="op-a")))
    [loop] = [loop for loop in loops if loop.name == "retention"]
    assert (loop.lease, loop.interval) == (retention.LEASE_NAME, 45.0)
    monkeypatch.setenv("JOBWARDEN_RETENTION", "off")
    loops, _ = periodic.loops(build_runtime(db, OperatorConfig(pod_name="op-a")))
    assert [loop.interval for loop in loops if loop.name == "retention"] == [0.0]
