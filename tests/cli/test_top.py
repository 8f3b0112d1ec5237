"""`jobwarden top`: dev's live view, against any database."""

from __future__ import annotations

import os
import subprocess
import sys

import jobwarden
from jobwarden.cli.liveview import LiveView
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion
from tests.support import testjobs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_view_shows_queues_backlog_throughput_and_running_jobs(
        client: jobwarden.Client, db: Database) -> None:
    for _ in range(3):
        client.enqueue(testjobs.Record, queue="mail")
    done = client.enqueue(testjobs.Record, queue="billing").id
    [claim] = db.jobs.claim(host="h", limit=1, grace_seconds=30, queues=["billing"])
    db.jobs.complete_many([Completion(id=done, claim_token=claim.claim_token, result=None)])
    client.enqueue(testjobs.Record, queue="billing")
    [running] = db.jobs.claim(host="worker-9", limit=1, grace_seconds=30, queues=["billing"])
    client.pause_queue("mail")
    lines = LiveView(client, title="jobwarden top", footer=["Ctrl-C to stop"]).frame() \
        .splitlines()
    assert lines[0].startswith("jobwarden top -")
    assert "completed=1" in lines[2] and "pending=3" in lines[2] and "running=1" in lines[2]
    mail = next(line for line in lines if line.startswith("mail "))
    assert mail.split()[:4] == ["mail", "paused", "3", "3"]
    assert any(f"#{running.id}" in line and "worker-9" in line for line in lines)
    assert lines[-1] == "Ctrl-C to stop"


def test_top_prints_frames_and_stops_after_the_given_iterations(client: jobwarden.Client,
                                                                dsn: str) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")},
           "JOBWARDEN_DSN": dsn, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-m", "jobwarden", "top", "--iterations", "2",
                          "--interval", "0.2", "--no-view"], env=env, capture_output=True,
                         text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all("jobwarden top" in line and "pending=1" in line
                                   for line in lines)
    bad = subprocess.run([sys.executable, "-m", "jobwarden", "top", "--interval", "0"],
                         env=env, capture_output=True, text=True, check=False, timeout=60)
    assert bad.returncode == 2 and "--interval" in bad.stderr  # a bad flag value
