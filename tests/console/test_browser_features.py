"""The console's operator features in a real browser (headless Chromium), real database.

The charts are SVG drawn under the strict CSP (no script, no inline style: the
browser must show coloured bars and log no violation), the running jobs update
live, the header jumps to a job, and deleting a job and clearing a lease each go
through their confirmation page. Skipped, with one line, without Chromium.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.browser import browser_paths

if browser_paths() is None:
    pytest.skip("chromium/chromedriver not installed: browser tests skipped",
                allow_module_level=True)

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

import jobwarden
from jobwarden import errors
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion, Failure
from tests.console.browser import PAGE_WAIT, chromium, navigate, serve, text_of
from tests.support import testjobs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("JOBWARDEN_SCREENSHOTS") or
                  tmp_path_factory.mktemp("console-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def console_url(console_db: Database) -> Iterator[str]:
    with serve(jobwarden.Client(database=console_db),
               ConsoleSettings(refresh_seconds=0.5)) as url:
        yield url


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as driver:
        yield driver


def _claim(client: jobwarden.Client, db: Database, queue: str, host: str) -> tuple[int, object]:
    job_id = client.enqueue(testjobs.Record, {"q": queue}, queue=queue).id
    [claim] = db.jobs.claim(host=host, limit=1, grace_seconds=60, queues=[queue])
    return job_id, claim.claim_token


def _failed(client: jobwarden.Client, db: Database) -> int:
    job_id, token = _claim(client, db, "billing", "worker-a")
    db.jobs.fail(Failure(id=job_id, claim_token=token,  # type: ignore[arg-type]
                         error="KeyError: 'invoice_id'", retryable=False, retry_in_seconds=0))
    return job_id


def _completed(client: jobwarden.Client, db: Database) -> int:
    job_id, token = _claim(client, db, "mail", "worker-b")
    db.jobs.complete_many([Completion(id=job_id, claim_token=token,  # type: ignore[arg-type]
                                      result={"sent": True})])
    return job_id


def _severe(browser: WebDriver) -> list[object]:
    return [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]


def test_the_header_jumps_to_a_job(browser: WebDriver, console_url: str,
                                   client: jobwarden.Client, db: Database) -> None:
    job_id = _failed(client, db)
    browser.get(console_url + "/queues")
    browser.find_element(By.ID, "jump-id").send_keys(f"#{job_id}")
    navigate(browser, By.ID, "jump-go")
    assert browser.current_url == f"{console_url}/jobs/{job_id}"
    assert text_of(browser, By.ID, "job-status") == "failed"
    browser.find_element(By.ID, "jump-id").send_keys("12; DROP TABLE jobs")
    navigate(browser, By.ID, "jump-go")
    assert "not a job id" in text_of(browser, By.ID, "error")
    browser.find_element(By.ID, "jump-id").send_keys(str(job_id + 1000))
    navigate(browser, By.ID, "jump-go")
    assert f"no job with id {job_id + 1000}" in text_of(browser, By.ID, "error")
    # The 400 and the 404 themselves are logged (network); nothing else is.
    assert [e for e in _severe(browser) if e["source"] != "network"] == []  # type: ignore[index]


def test_the_overview_draws_charts_and_shows_running_jobs_live(
        browser: WebDriver, console_url: str, client: jobwarden.Client, db: Database,
        screenshots: Path) -> None:
    for _ in range(3):
        _completed(client, db)
    for _ in range(2):
        _failed(client, db)
    running, _ = _claim(client, db, "reports", "worker-7")
    browser.get(console_url + "/")
    bars = browser.execute_script("""
        return ['completed', 'failed'].map(kind => Array.from(
            document.querySelectorAll('#chart-' + kind + ' svg rect')).map(r => ({
                value: Number(r.dataset.value), height: r.getBoundingClientRect().height,
                fill: getComputedStyle(r).fill})));""")
    completed, failed = bars
    assert sum(b["value"] for b in completed) == 3 and sum(b["value"] for b in failed) == 2
    # Drawn, and coloured by the stylesheet (the CSP let it apply): green and red.
    assert all(b["height"] > 0 for b in completed + failed)
    assert {b["fill"] for b in completed} == {"rgb(27, 127, 59)"}
    assert {b["fill"] for b in failed} == {"rgb(179, 38, 30)"}
    # Read in one script call: the live refresh may swap the row between two calls.
    row = browser.execute_script("const r = document.querySelector(arguments[0]);"
                                 " return r ? r.innerText : null;",
                                 f"#running tr[data-job='{running}']")
    assert row is not None and "worker-7" in row
    browser.save_screenshot(str(screenshots / "overview-charts.png"))
    # A job claimed now shows up without a reload (the live fragment).
    browser.execute_script("window.__sameDocument = true")
    later, _ = _claim(client, db, "reports", "worker-8")
    wait_for(lambda: browser.execute_script(
        f"return !!document.querySelector(\"#running tr[data-job='{later}']\")"),
        timeout=PAGE_WAIT, message="the new running job on the overview")
    assert browser.execute_script("return window.__sameDocument === true")
    assert _severe(browser) == []  # no CSP violation, no script error


def test_delete_a_failed_job_through_its_confirmation(browser: WebDriver, console_url: str,
                                                      client: jobwarden.Client, db: Database,
                                                      screenshots: Path) -> None:
    job_id = _failed(client, db)
    browser.get(f"{console_url}/jobs/{job_id}")
    navigate(browser, By.XPATH, "//button[text()='Delete…']")
    assert "failed" in text_of(browser, By.ID, "delete-facts")
    browser.save_screenshot(str(screenshots / "delete-confirm.png"))
    assert client.job(job_id).job_class  # still there while asking
    navigate(browser, By.ID, "confirm-yes")
    assert f"deleted job {job_id} (failed)" in text_of(browser, By.CLASS_NAME, "notice")
    with pytest.raises(errors.JobNotFound):
        client.job(job_id)


def test_clear_a_lease_through_its_confirmation(browser: WebDriver, console_url: str,
                                                db: Database, screenshots: Path) -> None:
    got = db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600,
                                host="worker-a")
    browser.get(console_url + "/leases")
    navigate(browser, By.XPATH, "//table[@id='leases']//button[text()='Clear…']")
    facts = text_of(browser, By.ID, "lease-facts")
    assert "job-17 on worker-a" in facts and str(got.token) in facts
    assert "has not lapsed" in text_of(browser, By.ID, "live-holder")
    browser.save_screenshot(str(screenshots / "lease-clear-confirm.png"))
    assert db.leases.owner_of("reports:nightly") == "job-17"
    navigate(browser, By.ID, "confirm-yes")
    assert "cleared lease reports:nightly slot 0" in text_of(browser, By.CLASS_NAME, "notice")
    assert db.leases.owner_of("reports:nightly") is None
    assert _severe(browser) == []
