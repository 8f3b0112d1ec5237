"""Queues: pause and resume, and the per-queue figures behind `queues list` and the console."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import wait_for


def test_claims_skip_a_paused_queue_in_every_claim_variant(client: jobwarden.Client,
                                                          db: Database) -> None:
    mail = client.enqueue(testjobs.Record, queue="mail", priority=10).id
    report = client.enqueue(testjobs.Record, queue="reports").id
    client.pause_queue("mail")
    assert [c.id for c in db.jobs.claim(host="h", limit=5, grace_seconds=30)] == [report]
    assert db.jobs.claim(host="h", limit=5, grace_seconds=30, queues=["mail"]) == []
    db.hosts.register(host="capped", pool="p", code_version="v", cap=5, worker_id=uuid.uuid4(),
                      pid=1, concurrency=5, queues=[])
    assert [c.id for c in db.jobs.claim(host="capped", limit=5, grace_seconds=30,
                                        host_cap=True)] == []
    assert db.jobs.claim(host="capped", limit=5, grace_seconds=30, queues=["mail"],
                         host_cap=True) == []
    assert client.resume_queue("mail") is True
    assert client.resume_queue("mail") is False
    assert [c.id for c in db.jobs.claim(host="h", limit=5, grace_seconds=30,
                                        queues=["mail"])] == [mail]


def test_pausing_twice_keeps_the_first_pause(client: jobwarden.Client, db: Database) -> None:
    client.pause_queue("q", by="first")
    client.pause_queue("q", by="second")
    [summary] = client.queues()
    assert summary.paused and db.queues.paused() == {"q"}


def test_a_running_job_finishes_when_its_queue_is_paused(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    running = client.enqueue(testjobs.Sleepy, {"seconds": 1.0}, queue="slow").id
    start_worker(queues=["slow"])
    wait_for(lambda: client.job(running).status is JobStatus.PROCESSING)
    client.pause_queue("slow")
    waiting = client.enqueue(testjobs.Record, queue="slow").id
    wait_for(lambda: client.job(running).status is JobStatus.COMPLETED)
    [summary] = client.queues()
    assert (summary.queue, summary.paused, summary.pending, summary.running) == \
        ("slow", True, 1, 0)
    assert client.job(waiting).status is JobStatus.PENDING
    client.resume_queue("slow")
    wait_for(lambda: client.job(waiting).status is JobStatus.COMPLETED)


def test_queue_figures_count_depth_backlog_age_running_and_throughput(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    for _ in range(3):
        client.enqueue(testjobs.Record, queue="a")
    client.enqueue(testjobs.Record, queue="a", delay=3600)
    done = client.enqueue(testjobs.Record, queue="b").id
    client.enqueue(testjobs.Record, queue="b")
    [claim] = db.jobs.claim(host="h", limit=1, grace_seconds=30, queues=["b"])
    assert claim.id == done
    db.jobs.complete_many([Completion(id=done, claim_token=claim.claim_token, result=None)])
    db.jobs.claim(host="h", limit=1, grace_seconds=30, queues=["b"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now() - interval '90 seconds' "
                     "WHERE queue = 'a' AND run_at <= now()")
    by_name = {q.queue: q for q in client.queues(window_seconds=60)}
    a, b = by_name["a"], by_name["b"]
    assert (a.pending, a.due, a.running, a.completed) == (4, 3, 0, 0)
    assert 90 <= a.oldest_due_seconds < 3600
    assert (b.pending, b.due, b.running, b.completed, b.oldest_due_seconds) == (0, 0, 1, 1, 0.0)
    assert b.completed_per_minute == 1.0


def test_bad_queue_names_are_refused_as_enqueue_refuses_them(client: jobwarden.Client) -> None:
    for name in ["", " ", "\t", "a\x00b"]:
        with pytest.raises(jobwarden.InvalidInput, match="queue"):
            client.pause_queue(name)
        with pytest.raises(jobwarden.InvalidInput, match="queue"):
            client.enqueue(testjobs.Record, queue=name)
    with pytest.raises(jobwarden.InvalidInput, match="at most 128"):
        client.pause_queue("x" * 129)
    assert client.queues() == [] and client.db.queues.paused() == set()


def test_queues_cli_pauses_lists_and_resumes(client: jobwarden.Client, dsn: str) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")},
           "JOBWARDEN_DSN": dsn, "PYTHONPATH": repo}

    def jw(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "jobwarden", "queues", *args], env=env,
                              capture_output=True, text=True, check=False)

    assert jw("pause", "mail").returncode == 0
    listed = json.loads(jw("list", "--json").stdout)
    assert [(q["queue"], q["paused"], q["pending"]) for q in listed] == [("mail", True, 1)]
    assert "paused" in jw("list").stdout
    assert json.loads(jw("resume", "mail", "--json").stdout) == {"queue": "mail",
                                                                "resumed": True}
    again = jw("resume", "mail")
    assert again.returncode == 1 and "was not paused" in again.stdout
    for blank in ["", " "]:  # a usage error, as `enqueue --queue " "` is
        bad = jw("pause", blank)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert "must not be empty or blank" in bad.stderr
    assert client.db.queues.paused() == set()
