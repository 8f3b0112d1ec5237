"""Search and bulk actions by filter: status, queue, class, time range, text, error."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Failure
from jobwarden.structs.search import JobFilter
from jobwarden.structs.states import JobStatus
from tests.support import testjobs

RECORD = "tests.support.testjobs:Record"
BOOM = "tests.support.testjobs:Boom"


def _fail_all(db: Database, error: str) -> None:
    for claim in db.jobs.claim(host="h", limit=1000, grace_seconds=30):
        db.jobs.fail(Failure(id=claim.id, claim_token=claim.claim_token, error=error,
                             retryable=False, retry_in_seconds=0))


def test_search_filters_narrow_and_keyset_pages_newest_first(client: jobwarden.Client,
                                                             db: Database, dsn: str) -> None:
    old = client.enqueue(testjobs.Record, {"user": "Alice"}, queue="mail").id
    boom = client.enqueue(testjobs.Boom, {"user": "bob"}, queue="mail").id
    _fail_all(db, "Traceback ...\nValueError: Bad Invoice 7")
    ids = [client.enqueue(testjobs.Record, {"n": n}, queue="reports").id for n in range(5)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET created_at = now() - interval '2 hours' "
                     "WHERE id = %s", (old,))

    def found(**kwargs: object) -> list[int]:
        return [j.id for j in client.search(JobFilter(**kwargs))]  # type: ignore[arg-type]

    assert found() == [*reversed(ids), boom, old]
    assert found(statuses=(JobStatus.FAILED,)) == [boom, old]
    assert found(queue="reports") == list(reversed(ids))
    assert found(class_prefix="tests.support.testjobs:B") == [boom]
    assert found(job_class=RECORD, queue="mail") == [old]
    assert found(text="alice") == [old]
    assert found(text="bad invoice") == [boom, old]
    assert found(error="VALUEERROR") == [boom, old]
    assert found(error="alice") == []
    now = client.db.now()
    assert found(created_to=now - datetime.timedelta(hours=1)) == [old]
    assert old not in found(created_from=now - datetime.timedelta(hours=1))
    first = client.search(JobFilter(queue="reports"), limit=2)
    second = client.search(JobFilter(queue="reports"), before=first[-1].id, limit=2)
    assert [j.id for j in first + second] == [ids[4], ids[3], ids[2], ids[1]]
    with pytest.raises(ValueError, match="limit"):
        client.search(limit=0)


def test_bulk_retry_touches_only_retryable_matching_jobs(client: jobwarden.Client,
                                                         db: Database) -> None:
    for n in range(3):
        client.enqueue(testjobs.Boom, {"n": n}, queue="a")
    client.enqueue(testjobs.Boom, queue="b")
    _fail_all(db, "RuntimeError: boom")
    pending = client.enqueue(testjobs.Record, queue="a").id
    dry = client.bulk("retry", JobFilter(queue="a"), dry_run=True)
    assert (dry.count, dry.dry_run) == (3, True)
    assert {j.status for j in client.search(JobFilter(queue="a"))} == {
        JobStatus.FAILED, JobStatus.PENDING}
    assert client.bulk("retry", JobFilter(queue="a")).count == 3
    assert [j.status for j in client.search(JobFilter(queue="a"))] == [JobStatus.PENDING] * 4
    assert client.search(JobFilter(queue="b"))[0].status is JobStatus.FAILED
    assert client.job(pending).attempts == 0
    assert client.bulk("retry", JobFilter(statuses=(JobStatus.PENDING,))).count == 0


def test_bulk_cancel_ends_pending_and_asks_running_to_stop_in_many_batches(
        client: jobwarden.Client, db: Database) -> None:
    ids = [r.id for r in client.enqueue_many(testjobs.Record, [{"n": n} for n in range(25)])]
    [running] = db.jobs.claim(host="h", limit=1, grace_seconds=30)
    done = client.enqueue(testjobs.Record, queue="other").id
    assert client.db.jobs.bulk("cancel", JobFilter(queue="default"), batch=4) == 25
    statuses = {j.id: j for j in client.search(JobFilter(queue="default"), limit=100)}
    assert statuses[running.id].status is JobStatus.PROCESSING
    assert statuses[running.id].cancel_requested
    assert all(statuses[i].status is JobStatus.CANCELLED for i in ids if i != running.id)
    assert client.job(done).status is JobStatus.PENDING


def test_bulk_purge_deletes_finished_matching_jobs_only(client: jobwarden.Client,
                                                        db: Database) -> None:
    client.enqueue(testjobs.Boom)
    _fail_all(db, "x")
    keep = client.enqueue(testjobs.Record).id
    assert client.bulk("purge", JobFilter(), dry_run=True).count == 1
    assert client.bulk("purge", JobFilter()).count == 1
    assert [j.id for j in client.search()] == [keep]
    with pytest.raises(ValueError, match="unknown bulk action"):
        client.bulk("explode", JobFilter())


def test_a_status_filter_on_failed_jobs_uses_an_index(client: jobwarden.Client,
                                                      dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, status, finished_at) "
                     "SELECT 'x:Y', 'completed', now() FROM generate_series(1, 20000)")
        conn.execute("ANALYZE jobwarden.jobs")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM jobwarden.jobs WHERE status = ANY('{failed}'"
            "::jobwarden.job_status[]) ORDER BY id DESC LIMIT 50").fetchall())
    assert "jobs_problem_idx" in plan


def _jw(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")},
           "JOBWARDEN_DSN": dsn, "PYTHONPATH": repo}
    return subprocess.run([sys.executable, "-m", "jobwarden", *args], env=env,
                          capture_output=True, text=True, check=False)


def test_cli_lists_with_filters_and_bulk_acts_only_with_yes(client: jobwarden.Client,
                                                            db: Database, dsn: str) -> None:
    client.enqueue(testjobs.Boom, {"who": "carol"}, priority=3)
    _fail_all(db, "Traceback\nKeyError: 'invoice'")
    out = _jw(dsn, "jobs", "list", "--status", "failed", "--text", "CAROL", "--since", "1h")
    assert out.returncode == 0, out.stderr
    assert "KeyError: 'invoice'" in out.stdout and "PRI" in out.stdout
    listed = json.loads(_jw(dsn, "jobs", "list", "--class-prefix", "tests.support",
                            "--json").stdout)
    assert [j["job_class"] for j in listed] == [BOOM]
    dry = json.loads(_jw(dsn, "jobs", "bulk", "retry", "--status", "failed", "--json").stdout)
    assert (dry["count"], dry["dry_run"]) == (1, True)
    assert client.search()[0].status is JobStatus.FAILED
    done = _jw(dsn, "jobs", "bulk", "retry", "--error", "keyerror", "--yes")
    assert done.returncode == 0 and "1 job(s) retried" in done.stdout
    assert client.search()[0].status is JobStatus.PENDING
    bad = _jw(dsn, "jobs", "list", "--since", "yesterday")
    assert bad.returncode == 2 and "neither ISO 8601" in bad.stderr  # a bad flag value
    assert bad.stderr.count("\n") == 1
