"""`jobs show` keeps one line per field (the traceback last, behind --traceback), and
`leases list` shows users' leases, Jobwarden's own only with --all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jobwarden
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Failure
from tests.support import testjobs

REPO = Path(__file__).resolve().parents[2]
TRACE = ('Traceback (most recent call last):\n  File "billing/jobs.py", line 42, in perform\n'
         '    invoice = load(data["invoice_id"])\nKeyError: \'invoice_id\'')


def jw(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env.update({"JOBWARDEN_DSN": dsn, "PYTHONPATH": str(REPO)})
    out = subprocess.run([sys.executable, "-m", "jobwarden", *args], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out


def test_jobs_show_prints_the_traceback_last_and_only_when_asked(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    job_id = client.enqueue(testjobs.Boom, {"invoice_id": 7}, queue="billing").id
    [claim] = db.jobs.claim(host="worker-a", limit=1, grace_seconds=30, queues=["billing"])
    db.jobs.fail(Failure(id=job_id, claim_token=claim.claim_token, error=TRACE,
                         retryable=False, retry_in_seconds=0))

    plain = jw(dsn, "jobs", "show", str(job_id)).stdout
    assert "Traceback (most recent call last)" not in plain and "billing/jobs.py" not in plain
    [error_line] = [line for line in plain.splitlines() if "last_error:" in line]
    assert "KeyError: 'invoice_id'" in error_line and "--traceback" in error_line
    fields = plain.split("\nattempts (oldest first):")[0].splitlines()
    assert all(": " in line for line in fields)  # one "name: value" line per field

    full = jw(dsn, "jobs", "show", str(job_id), "--traceback").stdout
    assert full.startswith(plain.rstrip("\n"))  # the same fields and attempts, then:
    tail = full[len(plain.rstrip("\n")):]
    assert "Traceback (most recent call last)" in tail
    assert tail.rstrip().endswith("KeyError: 'invoice_id'")  # the traceback is last


def test_leases_list_hides_jobwarden_s_own_leases_unless_all(db: Database, dsn: str) -> None:
    for name in ["jobwarden:gauges", "operator:reaper", "maintenance:retention",
                 "reports:nightly", "key:tenant-7"]:
        db.leases.try_acquire(name=name, owner="o", ttl_seconds=600, host="h")

    def names(*extra: str) -> list[str]:
        lines = jw(dsn, "leases", "list", *extra).stdout.splitlines()[1:]
        return sorted(line.split()[0] for line in lines)

    assert names() == ["key:tenant-7", "reports:nightly"]
    assert names("--all") == ["jobwarden:gauges", "key:tenant-7", "maintenance:retention",
                              "operator:reaper", "reports:nightly"]
