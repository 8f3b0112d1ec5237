"""Code-defined schedules: declared beside the job code, synced into the table at worker start."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from jobwarden.api.client import Client
from jobwarden.schedules import ScheduleError, registry, service
from jobwarden.worker.worker import Worker
from tests.support import schedulejobs
from tests.support.waiting import wait_for


@pytest.fixture(autouse=True)
def registrations() -> Iterator[None]:
    """Each test starts from the module's own registrations and leaves them as it found them."""
    saved = registry.defined()
    yield
    registry.clear()
    for code in saved:
        registry.register(code)


def test_importing_an_app_module_registers_its_schedules_validated_with_class_defaults() -> None:
    found = {code.name: code for code in registry.defined()}
    nightly = found["code-nightly"].spec
    assert (nightly.job_class, nightly.cron, nightly.timezone) == (
        "tests.support.schedulejobs:Nightly", "0 3 * * *", "Europe/Berlin")
    assert (nightly.queue, nightly.timeout_seconds, nightly.max_retries) == ("reports", 900.0, 1)
    assert found["code-nightly"].module == "tests.support.schedulejobs"
    assert schedulejobs.schedules == [found["code-cleanup"]]


def test_a_bad_code_schedule_fails_at_definition_not_at_run_time() -> None:
    with pytest.raises(ScheduleError, match="seconds"):
        registry.define("bad", job=schedulejobs.Tick, cron="*/5 * * * * *")
    assert "bad" not in {c.name for c in registry.defined()}


def test_one_name_defined_in_two_modules_is_an_error() -> None:
    registry.define("twice", job=schedulejobs.Tick, interval="5m", module="app.one")
    registry.define("twice", job=schedulejobs.Tick, interval="10m", module="app.one")  # reload
    with pytest.raises(ScheduleError, match="defined twice"):
        registry.define("twice", job=schedulejobs.Tick, interval="5m", module="app.two")


def test_sync_writes_code_schedules_and_never_overwrites_another_sources_row(
        client: Client) -> None:
    client.schedules.upsert("shared", interval="1h", job_class="tests.support.schedulejobs:Tick",
                            source="kubernetes")
    codes = [registry.define("mine", job=schedulejobs.Tick, interval="5m", module="app.jobs"),
             registry.define("shared", job=schedulejobs.Tick, interval="5m", module="app.jobs")]

    report = registry.sync(client.schedules, codes, imported=["app.jobs"])

    assert (report.upserted, report.clashes, report.suspended) == (["mine"], ["shared"], [])
    mine = client.schedules.get("mine")
    assert mine is not None and (mine.source, mine.origin, mine.interval) == (
        "code", "app.jobs", "5m")
    shared = client.schedules.get("shared")
    assert shared is not None and (shared.source, shared.interval) == ("kubernetes", "1h")


def test_a_code_schedule_removed_from_code_is_suspended_not_deleted_and_returns_when_redefined(
        client: Client) -> None:
    keep = registry.define("keep", job=schedulejobs.Tick, interval="5m", module="app.jobs")
    dropped = registry.define("dropped", job=schedulejobs.Tick, interval="5m",
                              module="app.jobs")
    elsewhere = registry.define("elsewhere", job=schedulejobs.Tick, interval="5m",
                                module="other.app")
    registry.sync(client.schedules, [keep, dropped, elsewhere],
                  imported=["app.jobs", "other.app"])

    # A new release of app.jobs no longer defines 'dropped'; this process does not
    # load other.app, so it cannot judge 'elsewhere' and leaves it alone.
    report = registry.sync(client.schedules, [keep], imported=["app.jobs"])

    assert report.suspended == ["dropped"]
    gone = client.schedules.get("dropped")
    assert gone is not None and (gone.suspended, gone.suspended_by) == (True, "removed")
    other = client.schedules.get("elsewhere")
    assert other is not None and not other.suspended

    registry.sync(client.schedules, [keep, dropped], imported=["app.jobs"])
    back = client.schedules.get("dropped")
    assert back is not None and not back.suspended


def test_a_worker_syncs_its_apps_code_schedules_at_start(
        client: Client, start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(apps=("tests.support.schedulejobs",), schedule_check_seconds=0)
    wait_for(lambda: {"code-nightly", "code-cleanup"} <= {r.name
                                                          for r in client.schedules.list()},
             message="code schedules synced")
    schedules = worker.extension(service.ScheduleExtension)
    assert schedules is not None
    wait_for(lambda: schedules.service.synced and all(
        t.interval == 0 for t in worker.periodic if t.name == "schedules"),
        message="sync-only task retired (runner off)")
    record = client.schedules.get("code-nightly")
    assert record is not None and (record.source, record.queue) == ("code", "reports")


def test_a_worker_whose_code_defines_no_schedule_still_suspends_one_its_module_dropped(
        client: Client, start_worker: Callable[..., Worker]) -> None:
    # A worker with no code schedule asks the database before it loads the sync
    # (service.py): a code row of a module it imports must still be judged removed.
    gone = registry.define("gone", job=schedulejobs.Tick, interval="5m",
                           module="tests.support.testjobs")
    registry.sync(client.schedules, [gone], imported=[])
    registry.clear()
    worker = start_worker(schedule_check_seconds=0)
    wait_for(lambda: (found := client.schedules.get("gone")) is not None and found.suspended,
             message="the dropped code schedule suspended")
    record = client.schedules.get("gone")
    assert record is not None and record.suspended_by == "removed"
    schedules = worker.extension(service.ScheduleExtension)
    assert schedules is not None and schedules.service.synced
