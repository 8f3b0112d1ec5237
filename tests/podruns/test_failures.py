"""fail_pod_run: a pod that ended without an outcome gets the dead-worker rules, fenced;
running_pod_runs; the reaper on a pod that never started (docs/podruns.md)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

import jobwarden
from jobwarden import errors, podruns
from jobwarden.db.database import Database
from jobwarden.maintenance import reaper
from jobwarden.structs.states import JobStatus
from tests.podruns.support import CLAIMANT, POD, counter, enqueue_pod_run, hold_lease, row
from tests.support import testjobs
from tests.support.waiting import wait_for

JOB = "tests.support.testjobs:Record"


def _claim(db: Database, *, start_deadline: float = 60) -> podruns.PodRunClaim:
    [claim] = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT,
                                     start_deadline=start_deadline, limit=1).claims
    return claim


def _start(db: Database, claim: podruns.PodRunClaim, *, host: str = "pod-1") -> None:
    """What `jobwarden run-job` records when it begins in its pod."""
    assert db.podruns.start(job_id=claim.job_id, claim_token=uuid.UUID(claim.claim_token),
                            host=host, grace_seconds=60) is not None


@pytest.mark.parametrize("cause", podruns.POD_FAILURE_CAUSES)
def test_each_cause_retries_a_started_idempotent_run_and_names_the_cause(
        client: jobwarden.Client, db: Database, cause: podruns.PodFailureCause) -> None:
    job_id = enqueue_pod_run(client, idempotent=True, max_retries=3)
    claim = _claim(db)
    _start(db, claim)
    labels = {"queue": "default", "job_class": JOB}
    retried = counter("jobwarden_jobs_retried_total", **labels, reason="pod_failure")

    status = podruns.fail_pod_run(db, claim.job_id, claim.claim_token, cause=cause,
                                  message="container  exited\n137")

    assert status == "pending"
    record = client.job(job_id)
    assert record.last_error == f"pod {cause}: container exited 137"
    assert record.finished_at is None and record.run_at > db.now()  # after the backoff
    [attempt] = client.attempts(job_id)
    assert (attempt.attempt, attempt.outcome, attempt.status_after, attempt.host) == (
        1, "failed", "pending", "pod-1")
    assert attempt.error == f"pod {cause}: container exited 137"
    assert counter("jobwarden_jobs_retried_total", **labels,
                   reason="pod_failure") == retried + 1


def test_a_started_non_idempotent_run_is_interrupted_never_run_again(
        client: jobwarden.Client, db: Database) -> None:
    job_id = enqueue_pod_run(client, idempotent=False)
    claim = _claim(db)
    _start(db, claim)
    interrupted = counter("jobwarden_jobs_interrupted_total", queue="default", job_class=JOB)
    assert podruns.fail_pod_run(db, job_id, claim.claim_token, cause="oom_killed",
                                message="OOMKilled") == "interrupted"
    assert client.job(job_id).status is JobStatus.INTERRUPTED
    assert counter("jobwarden_jobs_interrupted_total", queue="default",
                   job_class=JOB) == interrupted + 1
    assert podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=60,
                                  limit=5).claims == []


def test_a_run_whose_pod_never_started_is_retried_even_when_not_idempotent(
        client: jobwarden.Client, db: Database) -> None:
    job_id = enqueue_pod_run(client, idempotent=False, max_retries=1)
    claim = _claim(db)
    assert podruns.fail_pod_run(db, job_id, claim.claim_token, cause="image_pull",
                                message="ErrImagePull") == "pending"
    # Its code never ran: running it again is not running it twice. Attempts still count.
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now() WHERE id = %s", (job_id,))
    second = _claim(db)
    assert second.attempt == 2
    assert podruns.fail_pod_run(db, job_id, second.claim_token, cause="unschedulable",
                                message="0/3 nodes") == "failed"
    record = client.job(job_id)
    assert (record.status, record.last_error) == (JobStatus.FAILED, "pod unschedulable: 0/3 nodes")


def test_a_requested_cancel_ends_in_cancelled(client: jobwarden.Client, db: Database) -> None:
    job_id = enqueue_pod_run(client)
    claim = _claim(db)
    _start(db, claim)
    assert client.cancel(job_id) is JobStatus.PROCESSING  # asked to stop (Replace does this)
    assert podruns.fail_pod_run(db, job_id, claim.claim_token, cause="replaced",
                                message="pod deleted by Replace") == "cancelled"
    [attempt] = client.attempts(job_id)
    assert (attempt.outcome, attempt.status_after) == ("cancelled", "cancelled")


def test_a_stale_claim_changes_nothing(client: jobwarden.Client, db: Database) -> None:
    job_id = enqueue_pod_run(client)
    claim = _claim(db)
    before = row(db, job_id, "status::text", "attempts", "last_error", "updated_at")
    assert podruns.fail_pod_run(db, job_id, str(uuid.uuid4()), cause="killed",
                                message="x") is None
    assert row(db, job_id, "status::text", "attempts", "last_error", "updated_at") == before
    # The job recorded its outcome first: a late report of its pod's end is fenced too.
    db.jobs.mark_cancelled(job_id=job_id, claim_token=uuid.UUID(claim.claim_token), error="done")
    assert podruns.fail_pod_run(db, job_id, claim.claim_token, cause="killed",
                                message="x") is None
    assert client.job(job_id).last_error == "done"


@pytest.mark.parametrize("arguments", [
    {"cause": "exploded"}, {"claim_token": "not-a-uuid"}, {"job_id": 0}, {"message": None},
    {"message": "bad\x00text"},
], ids=["cause", "token", "job-id", "message-type", "nul"])
def test_bad_arguments_are_refused_and_nothing_changes(
        client: jobwarden.Client, db: Database, arguments: dict[str, object]) -> None:
    job_id = enqueue_pod_run(client)
    claim = _claim(db)
    call: dict[str, object] = {"job_id": job_id, "claim_token": claim.claim_token,
                               "cause": "killed", "message": "x", **arguments}
    with pytest.raises(errors.InvalidInput):
        podruns.fail_pod_run(db, call.pop("job_id"), call.pop("claim_token"),  # type: ignore[arg-type]
                             **call)  # type: ignore[arg-type]
    assert row(db, job_id, "status::text", "attempts") == ("processing", 1)


def test_the_lease_is_released_fenced_on_its_claim(client: jobwarden.Client,
                                                   db: Database) -> None:
    job_id = enqueue_pod_run(client, lease_name="key:fenced-release", on_busy="defer")
    claim = _claim(db)
    assert claim.lease_token is not None
    podruns.fail_pod_run(db, job_id, claim.claim_token, cause="evicted", message="node pressure")
    [lease] = db.leases.read("key:fenced-release")
    assert lease.owner is None and lease.token == claim.lease_token

    # A lease that changed hands meanwhile is not touched by the old claim's failure.
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET run_at = now() WHERE id = %s", (job_id,))
    second = _claim(db)
    with db.connection() as conn:  # its lease expires and someone else takes it over
        conn.execute("UPDATE jobwarden.leases SET expires_at = now() - interval '1 second' "
                     "WHERE name = 'key:fenced-release'")
    owner, token = hold_lease(db, "key:fenced-release")
    podruns.fail_pod_run(db, job_id, second.claim_token, cause="node_lost", message="gone")
    [lease] = db.leases.read("key:fenced-release")
    assert (lease.owner, lease.token) == (owner, token)


def test_the_next_run_deferred_on_the_freed_lease_is_due_at_once(
        client: jobwarden.Client, db: Database) -> None:
    # Replace's shape: the next slot's run was claimed while the old run held the
    # schedule lease, and deferred; the old pod is then stopped. Its end frees the
    # lease and hands it on, so the next pass starts the new run instead of waiting
    # out the defer delay (up to 30 s).
    old = enqueue_pod_run(client, {"n": 1}, lease_name="schedule:handover", on_busy="defer")
    old_claim = _claim(db)
    new = enqueue_pod_run(client, {"n": 2}, lease_name="schedule:handover", on_busy="defer")
    batch = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=60,
                                   limit=1)
    assert (batch.claims, batch.deferred) == ([], 1)
    assert row(db, new, "status::text", "run_at > now()") == ("pending", True)

    podruns.fail_pod_run(db, old, old_claim.claim_token, cause="replaced", message="replaced")

    assert row(db, new, "run_at <= now()") == (True,)
    [claim] = _claim_batch(db)
    assert claim.job_id == new and claim.lease_token is not None
    assert claim.lease_token > (old_claim.lease_token or 0)


def _claim_batch(db: Database) -> list[podruns.PodRunClaim]:
    return podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=60,
                                  limit=1).claims


def test_running_pod_runs_show_a_replace_and_whether_the_pod_started(
        client: jobwarden.Client, db: Database) -> None:
    first = enqueue_pod_run(client, {"n": 1})
    second = enqueue_pod_run(client, {"n": 2})
    enqueue_pod_run(client, pod_run="ExclusiveJob/team-b/other")
    claims = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=60,
                                    limit=5).claims
    _start(db, next(c for c in claims if c.job_id == first))
    client.cancel(first)

    running = podruns.running_pod_runs(db, [POD])

    assert [(r.job_id, r.cancel_requested, r.started) for r in running] == [
        (first, True, True), (second, False, False)]
    assert {r.claim_token for r in running} == {c.claim_token for c in claims}
    assert podruns.running_pod_runs(db, []) == []


def test_running_pod_runs_name_the_claimant_and_the_lease_token_a_pod_is_handed(
        client: jobwarden.Client, db: Database) -> None:
    """What a restarted operator needs to re-create the pod of a claim it never created."""
    leased = client.spec(testjobs.Record.path(), {"n": 1}, pod_run=POD, check=False)
    client.enqueue_specs([dataclasses.replace(leased, lease_name="key:running-lease")])
    plain = enqueue_pod_run(client, {"n": 2})
    claims = {c.job_id: c for c in podruns.claim_pod_runs(
        db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=60, limit=5).claims}
    assert len(claims) == 2
    _start(db, claims[plain])

    running = {r.job_id: r for r in podruns.running_pod_runs(db, [POD])}

    for job_id, claim in claims.items():
        assert running[job_id].lease_token == claim.lease_token
    assert [r.lease_token is not None for r in running.values()].count(True) == 1
    unstarted = next(r for r in running.values() if r.job_id != plain)
    assert unstarted.claimed_by == CLAIMANT and not unstarted.started
    assert running[plain].claimed_by != CLAIMANT and running[plain].started  # the pod's name


def test_the_reaper_retries_a_never_started_run_and_interrupts_a_started_one(
        client: jobwarden.Client, db: Database) -> None:
    unstarted = enqueue_pod_run(client, {"n": 1}, idempotent=False)
    started = enqueue_pod_run(client, {"n": 2}, idempotent=False)
    claims = podruns.claim_pod_runs(db, pod_runs=[POD], claimant=CLAIMANT, start_deadline=0.2,
                                    limit=5).claims
    claim = next(c for c in claims if c.job_id == started)
    assert db.podruns.start(job_id=started, claim_token=uuid.UUID(claim.claim_token),
                            host="pod-2", grace_seconds=0.2) is not None

    def both_reaped() -> bool:
        reaper.reap(db)
        return all(client.job(i).status is not JobStatus.PROCESSING
                   for i in (started, unstarted))

    wait_for(both_reaped, message="both claims reaped")

    record = client.job(unstarted)
    assert record.status is JobStatus.PENDING
    assert record.last_error is not None and record.last_error.startswith(
        f"reaped: the pod of {POD} did not start")
    assert client.job(started).status is JobStatus.INTERRUPTED
