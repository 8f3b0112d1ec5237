"""The console app in-process: pages, escaping, CSRF, auth, read-only mode, logs."""

from __future__ import annotations

import base64
import datetime
import logging

import pytest
from starlette.testclient import TestClient

import jobwarden
from jobwarden import errors
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Failure
from jobwarden.structs.states import JobStatus
from tests.console.conftest import csrf_of
from tests.support import testjobs

XSS = "<script>alert('pwned')</script>"


def _failed_job(client: jobwarden.Client, db: Database, data: object = None) -> int:
    job_id = client.enqueue(testjobs.Boom, data, queue="failing").id
    [claim] = db.jobs.claim(host="h", limit=1, grace_seconds=30, queues=["failing"])
    db.jobs.fail(Failure(id=job_id, claim_token=claim.claim_token,
                         error="Traceback (most recent call last):\nRuntimeError: boom",
                         retryable=False, retry_in_seconds=0))
    return job_id


@pytest.mark.parametrize("path", ["/", "/queues", "/jobs", "/schedules", "/leases", "/hosts"])
def test_every_page_renders_and_has_a_live_fragment(console: TestClient,
                                                    client: jobwarden.Client,
                                                    path: str) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    page = console.get(path)
    assert page.status_code == 200 and "<html" in page.text
    assert 'hx-get="' in page.text and 'hx-trigger="every ' in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.headers["x-frame-options"] == "DENY"
    fragment = console.get(path, params={"partial": "1"})
    assert fragment.status_code == 200 and "<html" not in fragment.text


def test_job_detail_shows_data_attempts_traceback_and_escapes_everything(
        console: TestClient, client: jobwarden.Client, db: Database) -> None:
    job_id = _failed_job(client, db, {"comment": XSS})
    page = console.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert XSS not in page.text
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page.text
    assert "RuntimeError: boom" in page.text and "traceback" in page.text
    assert 'id="attempts"' in page.text and ">failed<" in page.text
    listing = console.get("/jobs", params={"text": XSS})
    assert XSS not in listing.text and str(job_id) in listing.text
    assert console.get("/jobs/999999").status_code == 404


def test_filters_and_keyset_pages(make_console: object, console_db: Database,
                                  client: jobwarden.Client, db: Database) -> None:
    http = make_console(page_size=2)  # type: ignore[operator]
    ids = [client.enqueue(testjobs.Record, {"n": n}, queue="q").id for n in range(5)]
    failed = _failed_job(client, db)
    page = http.get("/jobs", params={"status": "failed"})
    assert f'data-job="{failed}"' in page.text and f'data-job="{ids[0]}"' not in page.text
    first = http.get("/jobs", params={"queue": "q"})
    assert [f'data-job="{i}"' in first.text for i in ids] == [False, False, False, True, True]
    assert f"before={ids[3]}" in first.text
    second = http.get("/jobs", params={"queue": "q", "before": str(ids[3])})
    assert [f'data-job="{i}"' in second.text for i in ids] == [False, True, True, False, False]
    assert http.get("/jobs", params={"status": "bogus"}).status_code == 400
    assert http.get("/jobs", params={"since": "yesterday"}).status_code == 400


def test_an_action_without_the_csrf_token_is_refused_and_changes_nothing(
        console: TestClient, client: jobwarden.Client, db: Database) -> None:
    job_id = _failed_job(client, db)
    refused = console.post("/actions/retry", data={"job_id": str(job_id)},
                           follow_redirects=False)
    assert refused.status_code == 403 and "security token" in refused.text
    forged = console.post("/actions/retry", data={"job_id": str(job_id), "csrf": "0" * 64},
                          follow_redirects=False)
    assert forged.status_code == 403
    assert client.job(job_id).status is JobStatus.FAILED
    token = csrf_of(console)
    cross = console.post("/actions/retry", data={"job_id": str(job_id), "csrf": token},
                         headers={"Origin": "http://evil.example"}, follow_redirects=False)
    assert cross.status_code == 403 and client.job(job_id).status is JobStatus.FAILED
    done = console.post("/actions/retry", data={"job_id": str(job_id), "csrf": token},
                        follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(f"/jobs/{job_id}")
    assert client.job(job_id).status is JobStatus.PENDING


def test_another_sessions_token_is_refused(make_console: object, client: jobwarden.Client,
                                           db: Database) -> None:
    alice, mallory = make_console(), make_console()  # type: ignore[operator]
    job_id = _failed_job(client, db)
    stolen = csrf_of(alice)
    csrf_of(mallory)
    refused = mallory.post("/actions/retry", data={"job_id": str(job_id), "csrf": stolen},
                           follow_redirects=False)
    assert refused.status_code == 403 and client.job(job_id).status is JobStatus.FAILED


def test_bulk_cancel_needs_a_confirmation_step(console: TestClient,
                                               client: jobwarden.Client) -> None:
    ids = [client.enqueue(testjobs.Record, queue="bulk").id for _ in range(3)]
    other = client.enqueue(testjobs.Record, queue="keep").id
    token = csrf_of(console)
    preview = console.post("/actions/bulk", data={"action": "cancel", "queue": "bulk",
                                                  "csrf": token})
    assert preview.status_code == 200 and 'id="confirm-count">3 job(s)' in preview.text
    assert all(client.job(i).status is JobStatus.PENDING for i in ids)
    done = console.post("/actions/bulk", data={"action": "cancel", "queue": "bulk",
                                               "confirm": "yes", "csrf": token},
                        follow_redirects=False)
    assert done.status_code == 303
    assert all(client.job(i).status is JobStatus.CANCELLED for i in ids)
    assert client.job(other).status is JobStatus.PENDING


def test_pause_and_resume_a_queue(console: TestClient, client: jobwarden.Client) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    token = csrf_of(console, "/queues")
    assert console.post("/actions/pause-queue", data={"queue": "mail", "csrf": token},
                        follow_redirects=False).status_code == 303
    assert [q.paused for q in client.queues()] == [True]
    assert "Resume" in console.get("/queues").text
    console.post("/actions/resume-queue", data={"queue": "mail", "csrf": token})
    assert [q.paused for q in client.queues()] == [False]


def test_read_only_mode_shows_no_actions_and_refuses_them(make_console: object,
                                                          client: jobwarden.Client,
                                                          db: Database) -> None:
    http = make_console(read_only=True)  # type: ignore[operator]
    job_id = _failed_job(client, db)
    page = http.get(f"/jobs/{job_id}")
    assert "read-only" in page.text and "/actions/" not in page.text
    refused = http.post("/actions/retry", data={"job_id": str(job_id)})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert client.job(job_id).status is JobStatus.FAILED


def test_a_token_is_required_when_configured(make_console: object) -> None:
    token = "s3cret-token-0123456789"
    http = make_console(token=token)  # type: ignore[operator]
    denied = http.get("/")
    assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Basic")
    assert http.get("/", headers={"Authorization": "Bearer wrong-token-0123456789"}
                    ).status_code == 401
    assert http.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    basic = base64.b64encode(f"admin:{token}".encode()).decode()
    assert http.get("/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
    assert http.get("/static/vendor/htmx/htmx.min.js").status_code == 401


def test_listening_beyond_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(errors.ConfigurationError, match="without authentication"):
        ConsoleSettings(host="0.0.0.0").check()
    with pytest.raises(errors.ConfigurationError, match="at least 16"):
        ConsoleSettings(host="0.0.0.0", token="short").check()
    ConsoleSettings(host="::1").check()
    ConsoleSettings(host="0.0.0.0", token="x" * 16).check()


def test_the_access_log_holds_no_job_data_or_query(console: TestClient, client: jobwarden.Client,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    job_id = client.enqueue(testjobs.Record, {"secret": "hunter2"}).id
    with caplog.at_level(logging.DEBUG):
        console.get(f"/jobs/{job_id}")
        console.get("/jobs", params={"text": "hunter2"})
    logged = "\n".join(r.getMessage() for r in caplog.records
                       if r.name.startswith(("jobwarden", "uvicorn")))
    assert f"GET /jobs/{job_id} 200" in logged and "GET /jobs 200" in logged
    assert "hunter2" not in logged


def test_a_schedule_page_shows_next_slots_fates_and_runs_it_now(
        console: TestClient, client: jobwarden.Client) -> None:
    t0 = datetime.datetime(2030, 1, 7, 12, 0, 30, tzinfo=datetime.UTC)
    client.schedules.upsert("team/report", interval="1m",
                            job_class="tests.support.schedulejobs:Tick", overlap="Replace",
                            now=t0)
    client.schedules.enqueue_due(now=t0 + datetime.timedelta(minutes=1))
    client.schedules.enqueue_due(now=t0 + datetime.timedelta(minutes=2))
    listing = console.get("/schedules")
    assert 'href="/schedules/team/report"' in listing.text
    page = console.get("/schedules/team/report")
    assert page.status_code == 200
    assert 'data-fate="replaced">1<' in page.text and 'data-fate="enqueued">2<' in page.text
    history = page.text.split('id="slot-history"', 1)[1].split("</table>", 1)[0]
    assert history.index(">enqueued<") < history.index(">replaced<")  # newest first
    assert page.text.count("<li>") >= 10  # the next ten slots
    fragment = console.get("/schedules/team/report", params={"partial": "1"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert console.get("/schedules/nope").status_code == 404

    before = len(client.db.jobs.schedule_recent("team/report", limit=100))
    refused = console.post("/actions/run-schedule-now", data={"schedule": "team/report"})
    assert refused.status_code == 403
    assert len(client.db.jobs.schedule_recent("team/report", limit=100)) == before
    token = csrf_of(console, "/schedules/team/report")
    done = console.post("/actions/run-schedule-now",
                        data={"schedule": "team/report", "csrf": token},
                        follow_redirects=False)
    assert done.status_code in (302, 303)
    assert done.headers["location"].startswith("/schedules/team/report?notice=")
    runs = client.db.jobs.schedule_recent("team/report", limit=100)
    assert len(runs) == before + 1 and ":run-now:" in (runs[0].unique_key or "")
    suspended = console.post("/actions/suspend-schedule",
                             data={"schedule": "team/report", "csrf": token})
    assert suspended.status_code == 200
    record = client.schedules.get("team/report")
    assert record is not None and record.suspended
    assert "suspended (manual)" in console.get("/schedules/team/report").text
