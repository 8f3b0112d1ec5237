"""`jobwarden run-job` as a real process: it starts only under a valid claim, runs the job
with the worker's machinery, heartbeats, renews and releases the lease, records the outcome
fenced, and exits with the documented code (docs/cli.md, docs/podruns.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import jobwarden
from jobwarden import podruns
from jobwarden.cli import EXIT_SCHEMA_MISSING
from jobwarden.db.database import Database
from jobwarden.maintenance import reaper
from jobwarden.podruns import runjob
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.podruns.support import CLAIMANT, POD, enqueue_pod_run, hold_lease, row
from tests.support import testjobs
from tests.support.waiting import wait_for

#: Every test here starts real `jobwarden run-job` processes.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FAST = ("--heartbeat-interval", "0.2", "--heartbeat-grace", "1.5")

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def run_job(dsn: str, tmp_path: Path) -> Iterator[Spawn]:
    """Start `jobwarden run-job` for a claim (env as the operator hands it); killed at teardown."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(claim: podruns.PodRunClaim | None = None, *args: str,
              env: dict[str, str] | None = None, host: str = "pod-1") -> subprocess.Popen[str]:
        handed: dict[str, str] = {}
        if claim is not None:
            handed = {"JOBWARDEN_JOB_ID": str(claim.job_id),
                      "JOBWARDEN_CLAIM_TOKEN": claim.claim_token}
            if claim.lease_token is not None:
                handed["JOBWARDEN_LEASE_TOKEN"] = str(claim.lease_token)
        full = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
        full.update({"JOBWARDEN_DSN": dsn, "JOBWARDEN_TEST_AUDIT_DSN": dsn,
                     "PYTHONPATH": str(REPO), "JOBWARDEN_HOST": host, **handed, **(env or {})})
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobwarden", "run-job", "--app", "tests.support.testjobs",
             *FAST, *args], env=full, cwd=REPO, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)


def _claim(db: Database, pod_run: str = POD) -> podruns.PodRunClaim:
    [claim] = podruns.claim_pod_runs(db, pod_runs=[pod_run], claimant=CLAIMANT,
                                     start_deadline=60, limit=1).claims
    return claim


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def _started(dsn: str, job_id: int) -> None:
    wait_for(lambda: any(r[0] == job_id for r in audit_rows(dsn, "start")),
             message=f"job {job_id} started", timeout=30)


def test_a_claimed_job_runs_to_a_fenced_completion(client: jobwarden.Client, db: Database,
                                                   run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 7}, job=testjobs.Hooked)
    claim = _claim(db)

    code, err = _finish(run_job(claim))

    assert code == runjob.EXIT_COMPLETED, err
    record = client.job(job_id)
    assert (record.status, record.result, record.attempts) == (
        JobStatus.COMPLETED, {"ok": True}, 1)
    assert [r[3] for r in audit_rows(dsn)] == ["before", "after", "on_success"]  # the hooks
    [attempt] = client.attempts(job_id)
    assert (attempt.outcome, attempt.host) == ("completed", "pod-1")  # the pod's name
    # The same claim cannot run twice: its row is no longer processing.
    code, err = _finish(run_job(claim))
    assert code == runjob.EXIT_FENCED and "no longer valid" in err
    assert len(audit_rows(dsn, "before")) == 1


def test_a_stale_claim_token_exits_fenced_without_running(client: jobwarden.Client,
                                                         db: Database, run_job: Spawn,
                                                         dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 1})
    claim = _claim(db)
    stale = podruns.PodRunClaim(**{**claim.__dict__, "claim_token": str(uuid.uuid4())})
    before = row(db, job_id, "status::text", "attempts", "heartbeat_at", "claimed_by")

    code, err = _finish(run_job(stale))

    assert code == runjob.EXIT_FENCED, err
    assert err.strip().count("\n") == 0 and "no longer valid" in err
    assert audit_rows(dsn) == []
    assert row(db, job_id, "status::text", "attempts", "heartbeat_at", "claimed_by") == before


def test_a_failure_is_recorded_with_the_retry_rules(client: jobwarden.Client, db: Database,
                                                    run_job: Spawn) -> None:
    job_id = enqueue_pod_run(client, {}, job=testjobs.Boom)
    code, _ = _finish(run_job(_claim(db)))
    assert code == runjob.EXIT_FAILED
    record = client.job(job_id)
    assert record.status is JobStatus.PENDING and "boom on attempt 1" in (record.last_error or "")


def test_the_hard_timeout_stops_the_job(client: jobwarden.Client, db: Database,
                                        run_job: Spawn) -> None:
    job_id = enqueue_pod_run(client, {}, job=testjobs.SpinForever)
    code, _ = _finish(run_job(_claim(db)))
    assert code == runjob.EXIT_FAILED
    record = client.job(job_id)
    assert record.status is JobStatus.PENDING
    assert (record.last_error or "").startswith("JobTimeout: attempt 1 passed its 0.5s timeout")


def test_a_cancel_request_stops_the_run_cooperatively(client: jobwarden.Client, db: Database,
                                                      run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {}, job=testjobs.UntilCancelled)
    proc = run_job(_claim(db))
    _started(dsn, job_id)

    assert client.cancel(job_id) is JobStatus.PROCESSING  # what Replace does to a running run

    code, err = _finish(proc)
    assert code == runjob.EXIT_CANCELLED, err
    assert client.job(job_id).status is JobStatus.CANCELLED
    assert [r[3] for r in audit_rows(dsn)] == ["start", "cancelled"]


def test_the_lease_is_renewed_with_the_handed_token_and_released(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"seconds": 60}, job=testjobs.UntilCancelled,
                             lease_name="key:pod-lease", on_busy="defer", lease_ttl_seconds=10.0)
    claim = _claim(db)
    [taken] = db.leases.read("key:pod-lease")
    assert taken.expires_in_seconds is not None and taken.expires_in_seconds > 60  # + deadline
    proc = run_job(claim)
    _started(dsn, job_id)

    # Renewed by the pod with its own window (10 s), under the claim and the handed token.
    def renewed() -> bool:
        [lease] = db.leases.read("key:pod-lease")
        return (lease.owner == claim.claim_token and lease.token == claim.lease_token
                and lease.expires_in_seconds is not None and lease.expires_in_seconds <= 10)
    wait_for(renewed, message="the lease renewed by run-job")

    client.cancel(job_id)
    code, err = _finish(proc)
    assert code == runjob.EXIT_CANCELLED, err
    [lease] = db.leases.read("key:pod-lease")
    assert lease.owner is None and lease.token == claim.lease_token


def test_a_lease_token_that_is_not_the_claims_is_refused(client: jobwarden.Client,
                                                         db: Database, run_job: Spawn,
                                                         dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 1}, lease_name="key:wrong-token")
    claim = _claim(db)
    assert claim.lease_token is not None
    wrong = podruns.PodRunClaim(**{**claim.__dict__, "lease_token": claim.lease_token + 1})
    code, _ = _finish(run_job(wrong))
    assert code == runjob.EXIT_FENCED
    assert audit_rows(dsn) == []
    assert row(db, job_id, "heartbeat_at") == (None,)


@pytest.mark.parametrize(("env", "args", "code", "says"), [
    ({}, (), 9, "JOBWARDEN_JOB_ID"),
    ({"JOBWARDEN_JOB_ID": "seven"}, (), 9, "JOBWARDEN_JOB_ID must be a whole number from 1 to"),
    ({"JOBWARDEN_JOB_ID": "1"}, (), 9, "JOBWARDEN_CLAIM_TOKEN"),
    ({"JOBWARDEN_JOB_ID": "1", "JOBWARDEN_CLAIM_TOKEN": "nope"}, (), 9, "a UUID"),
    ({"JOBWARDEN_JOB_ID": "1", "JOBWARDEN_CLAIM_TOKEN": str(uuid.UUID(int=1)),
      "JOBWARDEN_LEASE_TOKEN": "-3"}, (), 9, "JOBWARDEN_LEASE_TOKEN"),
    ({"JOBWARDEN_JOB_ID": "1", "JOBWARDEN_CLAIM_TOKEN": str(uuid.UUID(int=1)),
      "JOBWARDEN_STOP_GRACE": "soon"}, (), 9, "JOBWARDEN_STOP_GRACE"),
    ({}, ("--job-id", "x"), 2, "--job-id"),
    ({}, ("--claim-token", "x"), 2, "claim token"),
], ids=["no-job", "bad-job", "no-token", "bad-token", "bad-lease", "bad-grace", "flag-job",
        "flag-token"])
def test_bad_input_is_one_line_and_its_exit_code_and_changes_nothing(
        client: jobwarden.Client, db: Database, run_job: Spawn, env: dict[str, str],
        args: tuple[str, ...], code: int, says: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 1})
    claim = _claim(db)
    before = row(db, job_id, "status::text", "heartbeat_at", "claimed_by", "updated_at")
    exit_code, err = _finish(run_job(None, *args, env=env))
    assert exit_code == code, err
    assert says in err and len(err.strip().splitlines()) == 1
    assert row(db, job_id, "status::text", "heartbeat_at", "claimed_by", "updated_at") == before
    assert claim.job_id == job_id


def test_a_schema_that_is_missing_or_behind_exits_4_and_changes_nothing(
        client: jobwarden.Client, db: Database, run_job: Spawn) -> None:
    """A pod started against a database whose schema is not migrated (here: another
    schema name) says so in one line, exit 4, before it touches the claim."""
    job_id = enqueue_pod_run(client, {"n": 1})
    claim = _claim(db)
    before = row(db, job_id, "status::text", "heartbeat_at", "updated_at")
    code, err = _finish(run_job(claim, env={"JOBWARDEN_SCHEMA": "not_migrated"}))
    assert code == EXIT_SCHEMA_MISSING, err
    assert "run `jobwarden migrate`" in err and len(err.strip().splitlines()) == 1
    assert row(db, job_id, "status::text", "heartbeat_at", "updated_at") == before


@pytest.mark.parametrize(("job", "after"), [
    (testjobs.Sleepy, JobStatus.PENDING), (testjobs.SleepyOnce, JobStatus.INTERRUPTED),
], ids=["idempotent-retried", "non-idempotent-interrupted"])
def test_a_sigkilled_run_job_gets_the_dead_worker_rules_and_never_runs_twice(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str,
        job: type[jobwarden.Job], after: JobStatus) -> None:
    job_id = enqueue_pod_run(client, {"seconds": 120}, job=job)
    proc = run_job(_claim(db))
    _started(dsn, job_id)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    def reaped() -> bool:
        reaper.reap(db)
        return client.job(job_id).status is not JobStatus.PROCESSING

    wait_for(reaped, message="the claim reaped after its heartbeats stopped", timeout=30)
    record = client.job(job_id)
    assert record.status is after
    assert (record.last_error or "").startswith("reaped: no heartbeat from pod-1")
    if after is JobStatus.INTERRUPTED:
        assert podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT,
                                      start_deadline=60, limit=5).claims == []
    assert len(audit_rows(dsn, "start")) == 1


def test_sigterm_lets_the_job_finish_within_the_stop_grace(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"seconds": 1.0}, job=testjobs.SleepyOnce)
    proc = run_job(_claim(db), "--stop-grace", "60s")
    _started(dsn, job_id)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == runjob.EXIT_COMPLETED, err
    assert client.job(job_id).status is JobStatus.COMPLETED
    assert [r[3] for r in audit_rows(dsn)] == ["start", "end"]


@pytest.mark.parametrize(("job", "cancel", "after"), [
    (testjobs.Sleepy, False, JobStatus.PENDING),
    (testjobs.SleepyOnce, False, JobStatus.INTERRUPTED),
    (testjobs.SleepyOnce, True, JobStatus.CANCELLED),
], ids=["idempotent", "non-idempotent", "cancel-requested"])
def test_sigterm_past_the_stop_grace_records_the_stop_by_the_rules(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str,
        job: type[jobwarden.Job], cancel: bool, after: JobStatus) -> None:
    job_id = enqueue_pod_run(client, {"seconds": 120}, job=job,
                             lease_name="key:sigterm", on_busy="defer")
    claim = _claim(db)
    proc = run_job(claim, "--stop-grace", "0.3s")
    _started(dsn, job_id)
    if cancel:
        # Replace of a job that never looks (Sleepy only checks heartbeat() on its timer:
        # a cancel reaches it at its next heartbeat, so ask just before SIGTERM).
        with db.connection() as conn:
            conn.execute("UPDATE jobwarden.jobs SET cancel_requested = true WHERE id = %s",
                         (job_id,))
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    if cancel and code == runjob.EXIT_CANCELLED:  # it saw the cancel itself first
        assert client.job(job_id).status is JobStatus.CANCELLED
    else:
        assert code == runjob.EXIT_STOPPED, err
        record = client.job(job_id)
        assert record.status is after
        assert (record.last_error or "").startswith("pod stopped: SIGTERM")
    [lease] = db.leases.read("key:sigterm")
    assert lease.owner is None and lease.token == claim.lease_token
    assert audit_rows(dsn, "end") == []


def test_a_lease_lost_before_the_pod_started_defers_the_run(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 1}, lease_name="key:lapsed", on_busy="defer")
    claim = _claim(db)
    with db.connection() as conn:  # the pod was slow: the lease lapsed, another owner took it
        conn.execute("UPDATE jobwarden.leases SET expires_at = now() - interval '1 second' "
                     "WHERE name = 'key:lapsed'")
    hold_lease(db, "key:lapsed")

    code, err = _finish(run_job(claim))

    assert code == runjob.EXIT_NOT_RUN, err
    assert audit_rows(dsn) == []
    assert row(db, job_id, "status::text", "attempts", "deferrals") == ("pending", 0, 1)


def test_without_a_handed_lease_token_the_claims_lease_is_adopted(
        client: jobwarden.Client, db: Database, run_job: Spawn) -> None:
    job_id = enqueue_pod_run(client, {"n": 1}, lease_name="key:adopted")
    claim = _claim(db)
    unhanded = podruns.PodRunClaim(**{**claim.__dict__, "lease_token": None})
    code, err = _finish(run_job(unhanded))
    assert code == runjob.EXIT_COMPLETED, err
    assert client.job(job_id).status is JobStatus.COMPLETED
    [lease] = db.leases.read("key:adopted")
    assert lease.owner is None and lease.token == claim.lease_token  # released, not re-taken


def test_a_bad_failure_hook_is_refused_before_the_claim_is_touched(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str) -> None:
    job_id = enqueue_pod_run(client, {"n": 1})
    claim = _claim(db)
    code, err = _finish(run_job(claim, env={"JOBWARDEN_FAILURE_HOOK": "nowhere.at_all:hook"}))
    assert code == 9 and "failure hook" in err, err
    assert row(db, job_id, "heartbeat_at", "claimed_by") == (None, CLAIMANT)
    assert audit_rows(dsn) == []


#: What a pod run's process must not load: the operator (kopf and the Kubernetes client),
#: the console, the client API, the schedule runner, the tick engine, a pool worker's
#: extensions (host registry, retention, gauges) and every other command of the CLI.
NOT_IN_A_POD_RUN = ("kopf", "kubernetes", "aiohttp", "jobwarden.controller",
                    "jobwarden.console", "jobwarden.api", "jobwarden.schedules",
                    "jobwarden.tick", "jobwarden.extensions.hosts",
                    "jobwarden.extensions.retention", "jobwarden.extensions.gauges",
                    "jobwarden.maintenance.retention")
RUN_JOB_CLI = {"jobwarden.cli", "jobwarden.cli.arguments", "jobwarden.cli.common",
               "jobwarden.cli.podruns", "jobwarden.cli.worker"}


def test_run_job_loads_no_operator_console_client_or_other_command(
        client: jobwarden.Client, db: Database, run_job: Spawn, dsn: str) -> None:
    """run-job is on the path from a slot to the job's code (docs/benchmarks.md, "Pod per
    run against a native CronJob"): its process loads the worker's machinery and the
    database driver, nothing the run does not use."""
    enqueue_pod_run(client, job=testjobs.LoadedModules)

    code, err = _finish(run_job(_claim(db)))

    assert code == runjob.EXIT_COMPLETED, err
    [(_, _, _, _, detail)] = audit_rows(dsn, "modules")
    loaded = set(detail.split())
    assert "jobwarden.podruns.runjob" in loaded and "psycopg" in loaded  # it did run
    assert sorted(m for m in loaded if m in NOT_IN_A_POD_RUN
                  or m.startswith(tuple(f"{p}." for p in NOT_IN_A_POD_RUN))) == []
    assert sorted(m for m in loaded if m.startswith("jobwarden.cli")) == sorted(RUN_JOB_CLI)
