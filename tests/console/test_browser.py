"""The console in a real browser (headless Chromium) against a real database.

Skipped, with one line, where Chromium or its driver is not installed
(``apt-get install chromium chromium-driver``; scripts/test does it as root).
Each test saves screenshots into the run's screenshot directory
(``$JOBWARDEN_SCREENSHOTS`` or a pytest tmp dir, printed); docs/console.md
shows copies of them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobwarden.console.rendering import vendored_htmx
from tests.console.browser import browser_paths

if browser_paths() is None:
    pytest.skip("chromium/chromedriver not installed: browser tests skipped",
                allow_module_level=True)

from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

import jobwarden
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion, Failure
from jobwarden.structs.states import JobStatus
from tests.console.browser import PAGE_WAIT, chromium, navigate, serve, text_of
from tests.support import testjobs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

XSS = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
TRACE = ('Traceback (most recent call last):\n  File "billing/jobs.py", line 42, in perform\n'
         '    invoice = load(data["invoice_id"])\nKeyError: \'invoice_id\'')


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("JOBWARDEN_SCREENSHOTS") or
                  tmp_path_factory.mktemp("console-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots: {folder}")
    return folder


@pytest.fixture
def console_url(console_db: Database) -> Iterator[str]:
    settings = ConsoleSettings(refresh_seconds=0.5)
    with serve(jobwarden.Client(database=console_db), settings) as url:
        yield url


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as driver:
        yield driver


def _fail(db: Database, queue: str, error: str = TRACE, host: str = "worker-a") -> None:
    for claim in db.jobs.claim(host=host, limit=100, grace_seconds=30, queues=[queue]):
        db.jobs.fail(Failure(id=claim.id, claim_token=claim.claim_token, error=error,
                             retryable=False, retry_in_seconds=0))


def _complete(db: Database, queue: str, host: str = "worker-b") -> None:
    claims = db.jobs.claim(host=host, limit=100, grace_seconds=30, queues=[queue])
    db.jobs.complete_many([Completion(id=c.id, claim_token=c.claim_token,
                                      result={"sent": True, "id": c.id}) for c in claims])


@pytest.fixture
def seeded(client: jobwarden.Client, db: Database) -> dict[str, int]:
    """A small but varied database: several queues, failures with tracebacks, a lease."""
    for n in range(4):
        client.enqueue(testjobs.Record, {"invoice_id": n}, queue="billing", priority=n)
    _complete(db, "billing")
    for n in range(3):
        client.enqueue(testjobs.Boom, {"invoice": n}, queue="billing")
    _fail(db, "billing")
    mail = [client.enqueue(testjobs.Record, {"to": f"user{n}@example.com"}, queue="mail").id
            for n in range(3)]
    xss = client.enqueue(testjobs.Record, {"comment": XSS}, queue="reports").id
    client.enqueue(testjobs.Record, {"report": "daily"}, queue="reports", delay=3600)
    db.hosts.register(host="worker-a", pool="default", code_version="v42", cap=8,
                      worker_id=uuid.uuid4(), pid=4242, concurrency=8, queues=[])
    db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600,
                          host="worker-a")
    client.schedules.upsert("nightly-report", cron="0 3 * * *", job_class=testjobs.Record,
                            data={"report": "nightly"}, queue="reports")
    failed = client.search(jobwarden.structs.search.JobFilter(
        statuses=(JobStatus.FAILED,)), limit=1)[0].id
    return {"failed": failed, "xss": xss, "mail": mail[0]}


def _shot(browser: WebDriver, folder: Path, name: str) -> None:
    browser.save_screenshot(str(folder / f"{name}.png"))


def _no_alert(browser: WebDriver) -> bool:
    try:
        _ = browser.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_every_page_renders_in_the_browser(browser: WebDriver, console_url: str,
                                           seeded: dict[str, int], screenshots: Path) -> None:
    for path, name, marker in [("/", "overview", "Latest failures"),
                               ("/queues", "queues", "billing"),
                               ("/jobs", "jobs", "Scheduled for"),
                               (f"/jobs/{seeded['failed']}", "job", "KeyError: 'invoice_id'"),
                               ("/schedules", "schedules", "nightly-report"),
                               ("/schedules/nightly-report", "schedule", "Last slots"),
                               ("/leases", "leases", "reports:nightly"),
                               ("/hosts", "hosts", "worker-a")]:
        browser.get(console_url + path)
        assert marker in text_of(browser, By.TAG_NAME, "main"), path
        _shot(browser, screenshots, name)
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert logs == []  # no CSP violation, no script error, no missing asset


def test_filter_then_open_a_job(browser: WebDriver, console_url: str,
                                seeded: dict[str, int], screenshots: Path) -> None:
    browser.get(console_url + "/jobs")
    browser.find_element(By.CSS_SELECTOR, "input[name=status][value=failed]").click()
    browser.find_element(By.NAME, "queue").send_keys("billing")
    navigate(browser, By.ID, "apply")
    statuses = browser.execute_script(
        "return Array.from(document.querySelectorAll('#jobs tbody tr[data-job] .st'))"
        ".map(e => e.textContent)")
    assert statuses == ["failed"] * 3
    _shot(browser, screenshots, "jobs-filtered")
    navigate(browser, By.CSS_SELECTOR, "#jobs tbody tr[data-job] a")
    assert text_of(browser, By.ID, "job-status") == "failed"
    assert "KeyError" in text_of(browser, By.ID, "attempts")


def test_retry_a_failed_job(browser: WebDriver, console_url: str, client: jobwarden.Client,
                            seeded: dict[str, int]) -> None:
    job_id = seeded["failed"]
    browser.get(f"{console_url}/jobs/{job_id}")
    navigate(browser, By.XPATH, "//button[text()='Retry']")
    assert "will run again" in text_of(browser, By.CLASS_NAME, "notice")
    assert text_of(browser, By.ID, "job-status") == "pending"
    assert client.job(job_id).status is JobStatus.PENDING


def test_pause_a_queue(browser: WebDriver, console_url: str, client: jobwarden.Client,
                       seeded: dict[str, int], screenshots: Path) -> None:
    browser.get(console_url + "/queues")
    navigate(browser, By.XPATH, "//tr[@data-queue='mail']//button[text()='Pause']")
    assert "paused" in browser.execute_script(
        "return document.querySelector('tr[data-queue=mail]').textContent")
    assert {q.queue: q.paused for q in client.queues()}["mail"] is True
    _shot(browser, screenshots, "queues-paused")


def test_bulk_cancel_asks_for_confirmation(browser: WebDriver, console_url: str,
                                           client: jobwarden.Client, seeded: dict[str, int],
                                           screenshots: Path) -> None:
    browser.get(console_url + "/jobs?queue=mail")
    Select(browser.find_element(By.ID, "bulk-action")).select_by_value("cancel")
    navigate(browser, By.ID, "bulk-preview")
    assert text_of(browser, By.ID, "confirm-count").startswith("3 job(s)")
    _shot(browser, screenshots, "bulk-confirm")
    mail = jobwarden.structs.search.JobFilter(queue="mail")
    assert {j.status for j in client.search(mail)} == {JobStatus.PENDING}
    navigate(browser, By.ID, "confirm-yes")
    assert "3 job(s) cancelled" in text_of(browser, By.CLASS_NAME, "notice")
    assert {j.status for j in client.search(mail)} == {JobStatus.CANCELLED}
    assert client.job(seeded["xss"]).status is JobStatus.PENDING


def test_a_script_in_job_data_is_shown_as_text(browser: WebDriver, console_url: str,
                                               seeded: dict[str, int]) -> None:
    browser.get(f"{console_url}/jobs/{seeded['xss']}")
    shown = text_of(browser, By.ID, "job-data")
    assert "<script>window.__pwned = 1</script>" in shown and "<img src=x onerror=" in shown
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script(
        "return document.querySelectorAll('main script, main img').length") == 0
    assert _no_alert(browser)
    browser.get(f"{console_url}/jobs?text=script")
    assert browser.execute_script("return window.__pwned === undefined")


def test_an_action_without_the_csrf_token_is_refused(browser: WebDriver, console_url: str,
                                                     client: jobwarden.Client,
                                                     seeded: dict[str, int]) -> None:
    job_id = seeded["failed"]
    browser.get(f"{console_url}/jobs/{job_id}")
    browser.execute_script(
        "document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
    navigate(browser, By.XPATH, "//button[text()='Retry']")
    assert "security token" in text_of(browser, By.ID, "error")
    assert client.job(job_id).status is JobStatus.FAILED


def test_pages_update_live_without_a_reload(browser: WebDriver, console_url: str,
                                            client: jobwarden.Client,
                                            seeded: dict[str, int]) -> None:
    job_id = seeded["mail"]
    browser.get(f"{console_url}/jobs/{job_id}")
    assert text_of(browser, By.ID, "job-status") == "pending"
    browser.execute_script("window.__sameDocument = true")
    client.cancel(job_id)

    def shown() -> str:
        return str(browser.execute_script(
            "var e = document.getElementById('job-status'); return e ? e.textContent : ''"))

    wait_for(lambda: shown() == "cancelled", timeout=PAGE_WAIT, message="the live status")
    assert browser.execute_script("return window.__sameDocument === true")
    # The vendored htmx does it (hx-get + hx-trigger="every ..."), not a hand-written script.
    assert browser.execute_script("return window.htmx ? htmx.version : null") == \
        vendored_htmx()["version"]


def test_the_browser_tier_skips_without_chromium() -> None:
    # The guard at the top of this module: with either binary missing, browser_paths()
    # is None and the whole module is skipped with one line.
    paths = browser_paths()
    assert paths is not None and all(os.path.isabs(p) for p in paths)

