"""Schedules inside workers: the runner is a periodic task, and Replace stops a running job."""

from __future__ import annotations

import datetime as dt
import sys
import types
from collections.abc import Callable

import pytest

from jobwarden.api.client import Client
from jobwarden.schedules import service
from jobwarden.settings import WorkerSettings
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support.namedqueries import counting
from tests.support.waiting import wait_for

T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)


def test_a_worker_enqueues_due_slots_and_runs_them(
        client: Client, dsn: str, start_worker: Callable[..., Worker]) -> None:
    client.schedules.upsert("heartbeat", interval="1s", job_class="tests.support.schedulejobs:Tick")
    start_worker(apps=("tests.support.schedulejobs",), schedule_check_seconds=0.2)

    wait_for(lambda: len(audit_rows(dsn, "tick")) >= 3, timeout=20, message="three ticks")
    record = client.schedules.get("heartbeat")
    assert record is not None and record.enqueued_count >= 3
    jobs = [j for j in client.jobs(limit=100) if j.schedule_name == "heartbeat"]
    assert len(jobs) >= 3 and len({j.unique_key for j in jobs}) == len(jobs)
    wait_for(lambda: (client.schedules.get("heartbeat") or record).last_success_at is not None,
             message="a recorded success")


def test_replace_stops_the_running_previous_run_through_its_heartbeat(
        client: Client, dsn: str, start_worker: Callable[..., Worker]) -> None:
    client.schedules.upsert("replace", interval="1m", overlap="Replace",
                            job_class="tests.support.schedulejobs:RunUntilCancelled",
                            data={"seconds": 30}, now=T0)
    start_worker(apps=("tests.support.schedulejobs",), schedule_check_seconds=0)
    # The worker syncs the code schedules of its app (code-cleanup, code-nightly) at
    # its first periodic pass; this test's passes run in 2030, when those are due too.
    # Wait for that sync and suspend them, so the passes below see only "replace"
    # whenever the sync happens (under load it came between the two passes, and the
    # second report counted code-cleanup's slot as well).
    wait_for(lambda: {"code-cleanup", "code-nightly"}
             <= {s.name for s in client.schedules.list()}, timeout=30,
             message="the worker synced its app's code schedules")
    for name in ("code-cleanup", "code-nightly"):
        client.schedules.suspend(name)
    client.schedules.enqueue_due(now=T0 + dt.timedelta(seconds=31))
    [first] = client.jobs()
    wait_for(lambda: audit_rows(dsn, "start"), message="the first run started")

    report = client.schedules.enqueue_due(now=T0 + dt.timedelta(seconds=91))

    assert (report.enqueued, report.replaced) == (1, 1)
    wait_for(lambda: client.job(first.id).status is JobStatus.CANCELLED, timeout=15,
             message="the running run stopped")
    assert [r[0] for r in audit_rows(dsn, "stopped")] == [first.id]
    second = next(j for j in client.jobs() if j.id != first.id)
    client.cancel(second.id)  # let the worker stop promptly
    wait_for(lambda: client.job(second.id).status is JobStatus.CANCELLED, timeout=15,
             message="the second run cancelled")


def test_the_schedule_extension_has_a_periodic_task_and_the_tick_pass(
        client: Client) -> None:
    worker = types.SimpleNamespace(db=client.db,
                                   settings=WorkerSettings(schedule_check_seconds=7, apps=()))
    extension = service.ScheduleExtension(worker)  # type: ignore[arg-type]
    assert [(t.name, t.interval) for t in extension.periodic_tasks()] == [("schedules", 7)]
    assert extension.service.tolerance_seconds >= 60

    client.schedules.upsert("ticked", interval="1m", job_class="tests.support.schedulejobs:Tick",
                            now=client.db.now() - dt.timedelta(minutes=2))
    assert extension.tick_pass() == 1  # the newest missed slot (catch-up latest)
    assert extension.tick_pass() == 0


def test_a_pass_asks_first_only_while_the_runner_is_not_loaded(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobwarden.schedules import runner  # noqa: F401  (loaded, as after a due pass)

    passes = service.ScheduleService(client.db, check_seconds=5)
    passes.synced = True
    calls = counting(client.db, monkeypatch)
    client.schedules.upsert("asked", interval="1m", job_class="tests.support.schedulejobs:Tick",
                            now=client.db.now() - dt.timedelta(minutes=2))

    report = passes.run_once()
    assert report is not None and report.enqueued == 1
    assert "schedule_worker_check" not in calls  # the runner's claim was the question

    monkeypatch.delitem(sys.modules, "jobwarden.schedules.runner")  # a worker that never ran it
    calls.clear()
    assert passes.run_once() is None  # nothing due now: the runner is not needed
    assert calls == ["schedule_worker_check"]
