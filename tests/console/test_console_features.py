"""The console's operator features, in-process against a real database.

Jump to a job by id, the running jobs and the finished-per-minute charts on the
overview, deleting one job, clearing one lease: each with its bad input (a 4xx
page with the security headers, nothing changed) and its refusals.
"""

from __future__ import annotations

import datetime
import logging
import re
import threading

import psycopg
import pytest
from starlette.testclient import TestClient

import jobwarden
from jobwarden import errors
from jobwarden.console.charts import FinishedHistory
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion, Failure
from jobwarden.structs.states import JobStatus
from tests.console.conftest import csrf_of
from tests.support import testjobs
from tests.support.waiting import wait_for

BAD_IDS = ["", " ", "abc", "-1", "0", "1.5", "1e3", "12abc", "9" * 20,
           "9223372036854775808", "\x00", "1\x00", "\u0661\u0662", "\u00b2", "#", "##5"]


def _secure(response: object) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    assert headers["content-security-policy"].startswith("default-src 'none'")
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"


def _claimed(client: jobwarden.Client, db: Database, queue: str, host: str = "worker-a"
             ) -> tuple[int, int]:
    job_id = client.enqueue(testjobs.Record, {"q": queue}, queue=queue).id
    [claim] = db.jobs.claim(host=host, limit=1, grace_seconds=60, queues=[queue])
    assert claim.id == job_id
    return job_id, claim.claim_token


def _failed(client: jobwarden.Client, db: Database, queue: str = "billing") -> int:
    job_id, token = _claimed(client, db, queue)
    db.jobs.fail(Failure(id=job_id, claim_token=token, error="RuntimeError: boom",
                         retryable=False, retry_in_seconds=0))
    return job_id


def _completed(client: jobwarden.Client, db: Database, queue: str = "mail") -> int:
    job_id, token = _claimed(client, db, queue)
    db.jobs.complete_many([Completion(id=job_id, claim_token=token, result=None)])
    return job_id


# -- jump to a job -------------------------------------------------------------------

def test_the_header_jumps_to_a_job_by_id(console: TestClient, client: jobwarden.Client) -> None:
    job_id = client.enqueue(testjobs.Record, queue="mail").id
    assert 'action="/jobs/go"' in console.get("/queues").text  # on every page
    for typed in [str(job_id), f"#{job_id}", f"  {job_id} "]:
        went = console.get("/jobs/go", params={"id": typed}, follow_redirects=False)
        assert went.status_code == 303 and went.headers["location"] == f"/jobs/{job_id}"
    landed = console.get("/jobs/go", params={"id": str(job_id)})
    assert landed.status_code == 200 and f"Job {job_id}" in landed.text
    missing = console.get("/jobs/go", params={"id": str(job_id + 1000)})
    assert missing.status_code == 404 and f"no job with id {job_id + 1000}" in missing.text
    _secure(missing)


@pytest.mark.parametrize("typed", BAD_IDS)
def test_a_bad_job_id_in_the_header_form_is_a_400(console: TestClient, typed: str) -> None:
    page = console.get("/jobs/go", params={"id": typed}, follow_redirects=False)
    assert page.status_code == 400
    # (A NUL is refused for every field before any view, in words of its own.)
    assert ("NUL" if "\x00" in typed else "not a job id") in page.text
    _secure(page)


def test_the_jump_without_an_id_is_a_400(console: TestClient) -> None:
    page = console.get("/jobs/go")
    assert page.status_code == 400
    _secure(page)


# -- the overview: running jobs and charts ----------------------------------------

def test_the_overview_lists_the_running_jobs(console: TestClient, client: jobwarden.Client,
                                             db: Database) -> None:
    assert "nothing running" in console.get("/").text
    running, _ = _claimed(client, db, "reports", host="worker-7")
    waiting = client.enqueue(testjobs.Record, queue="mail").id
    for page in (console.get("/"), console.get("/", params={"partial": "1"})):
        table = page.text.split('id="running"', 1)[1].split("</table>", 1)[0]
        assert f'data-job="{running}"' in table and "worker-7" in table
        assert f'data-job="{waiting}"' not in table


def _bars(page: str, kind: str) -> list[int]:
    figure = page.split(f'id="chart-{kind}"', 1)[1].split("</figure>", 1)[0]
    return [int(v) for v in re.findall(r'data-value="(\d+)"', figure)]


def test_the_overview_charts_jobs_finished_per_minute(console: TestClient,
                                                      client: jobwarden.Client,
                                                      db: Database) -> None:
    empty = console.get("/").text  # nothing finished yet: flat charts, no error
    assert _bars(empty, "completed") == [] and _bars(empty, "failed") == []
    assert "<svg" in empty and "<script" not in empty.split("</head>", 1)[1]
    for _ in range(3):
        _completed(client, db)
    for _ in range(2):
        _failed(client, db)
    page = console.get("/", params={"partial": "1"}).text
    assert sum(_bars(page, "completed")) == 3 and sum(_bars(page, "failed")) == 2
    assert "3 in all" in page and "2 in all" in page


def test_settled_minutes_are_kept_and_only_recent_ones_read_again(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    old, recent = _completed(client, db), _completed(client, db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET finished_at = now() - interval '10 minutes' "
                     "WHERE id = %s", (old,))
    history = FinishedHistory()
    first = history.series(db, db.jobs.now())
    assert len(first) == 60 and sum(m.completed for m in first) == 2
    # Both rows go (a purge): the settled minute is kept, the recent one is read again.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM jobwarden.jobs WHERE id = ANY(%s)", ([old, recent],))
    second = history.series(db, db.jobs.now())
    assert [m.completed for m in second if m.completed] == [1]
    assert FinishedHistory().series(db, db.jobs.now())[-1].completed == 0


def test_the_per_minute_query_is_a_range_on_the_finished_index(db: Database,
                                                              dsn: str) -> None:
    from jobwarden.db.queries import for_schema

    query = for_schema("jobwarden")["jobs_finished_per_minute"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + query,  # type: ignore[arg-type]
            {"since": datetime.datetime.now(datetime.UTC)}).fetchall())
    assert "jobs_finished_idx" in plan, plan


def test_the_running_jobs_come_from_the_processing_indexes_not_a_walk(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    # A table of finished jobs with nothing running: a walk of the primary key
    # newest first (what the search's status filter gets) would visit every row.
    client.enqueue_many(testjobs.Record, [{"n": n} for n in range(20_000)], queue="done")
    running, _ = _claimed(client, db, "reports")
    from jobwarden.db.queries import for_schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET status = 'completed', finished_at = now() "
                     "WHERE queue = 'done'")
        conn.execute("ANALYZE jobwarden.jobs")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + for_schema("jobwarden")["job_running"],  # type: ignore[arg-type]
            {"limit": 20}).fetchall())
    assert "jobs_pkey" not in plan and ("jobs_claimed_by_idx" in plan
                                        or "jobs_reap_idx" in plan), plan
    assert [j.id for j in client.running(limit=20)] == [running]


# -- delete one job ----------------------------------------------------------------

def test_delete_a_finished_job_after_confirming(console: TestClient, client: jobwarden.Client,
                                                db: Database,
                                                caplog: pytest.LogCaptureFixture) -> None:
    job_id = _failed(client, db)
    assert "/actions/delete-job" in console.get(f"/jobs/{job_id}").text
    token = csrf_of(console)
    asked = console.post("/actions/delete-job", data={"csrf": token, "job_id": str(job_id)})
    assert asked.status_code == 200 and f"Yes, delete job {job_id}" in asked.text
    assert client.job(job_id).status is JobStatus.FAILED  # asking changed nothing
    with caplog.at_level(logging.INFO, logger="jobwarden.console"):
        done = console.post("/actions/delete-job", data={"csrf": token, "job_id": str(job_id),
                                                         "confirm": "yes"},
                            follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith("/jobs?notice=")
    with pytest.raises(errors.JobNotFound):
        client.job(job_id)
    assert db.jobs.attempts(job_id) == []
    assert f"console: deleted job {job_id} (failed)" in caplog.text


@pytest.mark.parametrize("state", ["pending", "processing"])
def test_an_unfinished_job_is_not_deleted_and_the_page_says_why(
        console: TestClient, client: jobwarden.Client, db: Database, state: str) -> None:
    if state == "pending":
        job_id = client.enqueue(testjobs.Record, queue="mail").id
    else:
        job_id, _ = _claimed(client, db, "mail")
    assert "/actions/delete-job" not in console.get(f"/jobs/{job_id}").text
    token = csrf_of(console)
    asked = console.post("/actions/delete-job", data={"csrf": token, "job_id": str(job_id)})
    assert asked.status_code == 200 and 'id="refused"' in asked.text
    assert "cancel it first" in asked.text and 'id="confirm-yes"' not in asked.text
    forced = console.post("/actions/delete-job", data={"csrf": token, "job_id": str(job_id),
                                                       "confirm": "yes"})
    assert forced.status_code == 200 and f"not deleted: job {job_id} is {state}" in forced.text
    assert client.job(job_id).status.value == state


def test_a_delete_racing_a_claim_waits_for_it_and_deletes_nothing(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    job_id = _failed(client, db)
    result: list[tuple[bool, JobStatus]] = []
    with psycopg.connect(dsn) as claim:
        # A retry and a claim of this job, written but not yet committed.
        claim.execute("UPDATE jobwarden.jobs SET status = 'processing', claimed_by = 'w2', "
                      "claimed_at = now(), claim_token = gen_random_uuid(), "
                      "claim_expires_at = now() + interval '1 minute', finished_at = NULL "
                      "WHERE id = %s", (job_id,))
        deleting = threading.Thread(target=lambda: result.append(client.delete(job_id)))
        deleting.start()
        with psycopg.connect(dsn, autocommit=True) as watch:
            wait_for(lambda: watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE '%%DELETE FROM%%'"
            ).fetchone() == (1,),
                timeout=30, message="the delete waiting on the claim's row lock")
        claim.commit()
        deleting.join(timeout=30)
    assert result == [(False, JobStatus.PROCESSING)]
    assert client.job(job_id).status is JobStatus.PROCESSING


@pytest.mark.parametrize("typed", BAD_IDS)
def test_delete_with_a_bad_job_id_is_a_400(console: TestClient, client: jobwarden.Client,
                                           db: Database, typed: str) -> None:
    job_id = _failed(client, db)
    token = csrf_of(console)
    for confirm in ("", "yes"):
        page = console.post("/actions/delete-job", data={"csrf": token, "job_id": typed,
                                                         "confirm": confirm})
        assert page.status_code == 400, (typed, page.text[:300])
        _secure(page)
    assert client.job(job_id).status is JobStatus.FAILED


def test_delete_of_an_unknown_job_is_a_404_and_without_the_token_a_403(
        console: TestClient, make_console: object, client: jobwarden.Client,
        db: Database) -> None:
    job_id = _failed(client, db)
    token = csrf_of(console)
    for confirm in ("", "yes"):
        page = console.post("/actions/delete-job", data={"csrf": token, "job_id": "987654321",
                                                         "confirm": confirm})
        assert page.status_code == 404
    forged = console.post("/actions/delete-job", data={"job_id": str(job_id), "confirm": "yes"})
    assert forged.status_code == 403
    read_only = make_console(read_only=True)  # type: ignore[operator]
    assert "/actions/delete-job" not in read_only.get(f"/jobs/{job_id}").text
    refused = read_only.post("/actions/delete-job", data={
        "csrf": token, "job_id": str(job_id), "confirm": "yes"})
    assert refused.status_code == 403
    assert client.job(job_id).status is JobStatus.FAILED


# -- clear one lease ---------------------------------------------------------------

def _holder(db: Database, name: str) -> tuple[str | None, int]:
    [row] = [r for r in db.leases.read(name) if r.slot == 0]
    return row.owner, row.token


def test_clear_a_lease_after_confirming_its_holder(console: TestClient, db: Database,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    got = db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600,
                                host="worker-a")
    assert got.acquired and got.token is not None
    listing = console.get("/leases").text
    assert "/actions/clear-lease" in listing and f'name="token" value="{got.token}"' in listing
    token = csrf_of(console, "/leases")
    form = {"csrf": token, "name": "reports:nightly", "slot": "0", "token": str(got.token)}
    asked = console.post("/actions/clear-lease", data=form)
    assert asked.status_code == 200
    assert "job-17 on worker-a" in asked.text and 'id="live-holder"' in asked.text
    assert _holder(db, "reports:nightly") == ("job-17", got.token)  # asking changed nothing
    with caplog.at_level(logging.INFO, logger="jobwarden.console"):
        done = console.post("/actions/clear-lease", data={**form, "confirm": "yes"},
                            follow_redirects=False)
    assert done.status_code == 303 and "cleared" in done.headers["location"]
    assert _holder(db, "reports:nightly") == (None, got.token)  # the token stays
    assert "console: cleared lease 'reports:nightly' slot 0 (was job-17 on worker-a, token" \
        in caplog.text
    # The next holder's token is still larger (fencing holds across a clear).
    again = db.leases.try_acquire(name="reports:nightly", owner="job-18", ttl_seconds=600)
    assert again.token is not None and again.token > got.token


def test_a_lease_that_changed_hands_after_the_confirmation_is_not_cleared(
        console: TestClient, db: Database) -> None:
    first = db.leases.try_acquire(name="key:42", owner="job-1", ttl_seconds=600)
    token = csrf_of(console, "/leases")
    form = {"csrf": token, "name": "key:42", "slot": "0", "token": str(first.token)}
    assert console.post("/actions/clear-lease", data=form).status_code == 200
    db.leases.release(name="key:42", owner="job-1")
    second = db.leases.try_acquire(name="key:42", owner="job-2", ttl_seconds=600)
    page = console.post("/actions/clear-lease", data={**form, "confirm": "yes"})
    assert page.status_code == 200 and "not cleared" in page.text
    assert _holder(db, "key:42") == ("job-2", second.token)
    stale = console.post("/actions/clear-lease", data=form)  # the confirmation says so too
    assert 'id="refused"' in stale.text and 'id="confirm-yes"' not in stale.text


@pytest.mark.parametrize("field,value", [
    ("name", ""), ("name", "L" * 201), ("name", "key\x00"),
    ("slot", ""), ("slot", "-1"), ("slot", "x"), ("slot", "2147483648"), ("slot", "\u00b2"),
    ("token", ""), ("token", "-5"), ("token", "1.0"), ("token", "9223372036854775808"),
    ("token", "9" * 40),
])
def test_clear_lease_with_bad_input_is_a_400_and_changes_nothing(
        console: TestClient, db: Database, field: str, value: str) -> None:
    got = db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600)
    form = {"csrf": csrf_of(console, "/leases"), "name": "reports:nightly", "slot": "0",
            "token": str(got.token), field: value}
    for confirm in ("", "yes"):
        page = console.post("/actions/clear-lease", data={**form, "confirm": confirm})
        assert page.status_code == 400, (field, value, page.text[:300])
        _secure(page)
    assert _holder(db, "reports:nightly") == ("job-17", got.token)


def test_clear_lease_without_the_token_or_read_only_is_refused(
        console: TestClient, make_console: object, db: Database) -> None:
    got = db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600)
    form = {"name": "reports:nightly", "slot": "0", "token": str(got.token), "confirm": "yes"}
    forged = console.post("/actions/clear-lease", data=form)
    assert forged.status_code == 403
    read_only = make_console(read_only=True)  # type: ignore[operator]
    assert "/actions/clear-lease" not in read_only.get("/leases").text
    refused = read_only.post("/actions/clear-lease",
                             data={**form, "csrf": csrf_of(console, "/leases")})
    assert refused.status_code == 403
    assert _holder(db, "reports:nightly") == ("job-17", got.token)


def test_a_lapsed_lease_is_cleared_without_the_live_holder_warning(
        console: TestClient, db: Database, dsn: str) -> None:
    got = db.leases.try_acquire(name="reports:nightly", owner="job-17", ttl_seconds=600)
    with psycopg.connect(dsn, autocommit=True) as conn:  # its holder stopped renewing
        conn.execute("UPDATE jobwarden.leases SET expires_at = now() - interval '1 minute' "
                     "WHERE name = 'reports:nightly'")
    # (The leases page lists held leases only; a lapsed one is free for the next taker.)
    form = {"csrf": csrf_of(console), "name": "reports:nightly", "slot": "0",
            "token": str(got.token)}
    asked = console.post("/actions/clear-lease", data=form)
    assert "lapsed" in asked.text and 'id="live-holder"' not in asked.text
    console.post("/actions/clear-lease", data={**form, "confirm": "yes"})
    assert _holder(db, "reports:nightly") == (None, got.token)
