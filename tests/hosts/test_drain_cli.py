"""``jobwarden drain --wait``, ``resume`` and the hosts part of ``status``, as real commands."""

from __future__ import annotations

import json
from collections.abc import Callable

import jobwarden
from jobwarden.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_TIMEOUT
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Completion
from jobwarden.worker.worker import Worker
from tests.support.hostjobs import fake_running_job, run_cli, start_cli
from tests.support.waiting import wait_for

JobStatus = jobwarden.JobStatus


def test_drain_wait_exits_0_once_running_jobs_finish(client: jobwarden.Client, db: Database,
                                                     dsn: str) -> None:
    claim = fake_running_job(db, client, host="cli-host")
    waiting = start_cli(dsn, "drain", "--host", "cli-host", "--wait=30", "--interval", "0.1")
    assert waiting.stdout is not None
    lines = [waiting.stdout.readline() for _ in range(2)]
    assert lines[0].startswith("draining host cli-host")
    assert "1 job(s) running (cli-host: 1)" in lines[1]  # progress, per host
    assert waiting.poll() is None  # still waiting while the job runs

    db.jobs.complete_many([Completion(id=claim.id, claim_token=claim.claim_token, result=None)])

    assert waiting.wait(timeout=30) == EXIT_OK
    rest = waiting.stdout.read().splitlines()
    assert "0 job(s) running" in rest[0] and "idle" in rest[-1]
    assert client.hosts.status(host="cli-host")[0].draining


def test_drain_wait_exits_non_zero_at_its_timeout(client: jobwarden.Client, db: Database,
                                                  dsn: str) -> None:
    claim = fake_running_job(db, client, host="cli-host")

    done = run_cli(dsn, "drain", "--host", "cli-host", "--wait=0.5", "--json")

    assert done.returncode == EXIT_TIMEOUT
    report = json.loads(done.stdout)
    assert report["idle"] is False and report["running"] == {"cli-host": 1}
    assert client.job(claim.id).status is JobStatus.PROCESSING


def test_drain_without_wait_returns_at_once_and_resume_lifts_it(
        client: jobwarden.Client, dsn: str, start_worker: Callable[..., Worker]) -> None:
    start_worker(host="cli-host")
    wait_for(lambda: client.hosts.names() == ["cli-host"], message="registered")

    drained = run_cli(dsn, "drain", "--host", "cli-host", "--expires", "0", "--reason",
                      "db upgrade", "--json")
    assert drained.returncode == EXIT_OK and json.loads(drained.stdout) == {
        "draining": ["cli-host"]}
    [host] = client.hosts.status()
    assert host.draining and host.drain_reason == "db upgrade" and host.drain_expires_at is None

    resumed = run_cli(dsn, "resume", "--host", "cli-host")
    assert resumed.returncode == EXIT_OK and "cli-host" in resumed.stdout
    assert not client.hosts.status()[0].draining


def test_draining_an_unknown_host_exits_not_found(dsn: str) -> None:
    done = run_cli(dsn, "drain", "--host", "nope")
    assert done.returncode == EXIT_NOT_FOUND
    assert "nope" in done.stderr


def test_status_shows_hosts_running_cap_draining_last_seen_and_version(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    fake_running_job(db, client, host="seen-host", code_version="v7")
    client.hosts.set_pool_cap("default", 5)
    client.hosts.drain(host="seen-host", reason="deploy")

    table = run_cli(dsn, "status")
    as_json = run_cli(dsn, "status", "--json")

    assert table.returncode == EXIT_OK, table.stderr
    header, row = [line.split() for line in table.stdout.splitlines()
                   if line.startswith(("HOST", "seen-host"))]
    assert header[:5] == ["HOST", "POOL", "STATE", "RUNNING", "CAP"]
    assert row[:6] == ["seen-host", "default", "draining", "1", "5", "1"]
    assert row[-1] == "v7" and "deploy" in table.stdout and "ago" in table.stdout
    [host] = json.loads(as_json.stdout)["hosts"]
    assert (host["name"], host["running"], host["cap"], host["draining"],
            host["code_version"]) == ("seen-host", 1, 5, True, "v7")
