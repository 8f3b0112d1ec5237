"""Runs in pods of their own, end to end: the operator claims, the process kubelet runs
`jobwarden run-job` in each pod, the job's outcome is recorded under the pod's claim.

Every pod the operator creates becomes a real `python -m jobwarden run-job` process
(tests/e2e/kubelet.py); killing that process with SIGKILL is a pod whose container
died without recording an outcome.
"""

from __future__ import annotations

import threading
from typing import Any

import kmock
import psycopg
import pytest

from jobwarden.controller import podrunning, runpods
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.e2e.conftest import NAMESPACE, OPERATOR_ENV, SECRET, Cluster

pytestmark = pytest.mark.slow

#: run-job's timings, through the template's env as a user would set them.
RUN_ENV = {"JOBWARDEN_HEARTBEAT_INTERVAL": "0.3", "JOBWARDEN_HEARTBEAT_GRACE": "8",
           "JOBWARDEN_STOP_GRACE": "3"}


def template(**pod: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"team": "e2e"}},
            "spec": {"terminationGracePeriodSeconds": 10, **pod, "containers": [{
                "name": "job", "image": "example/jobs:1",
                "env": [{"name": k, "value": v} for k, v in RUN_ENV.items()]}]}}


def schedule(name: str, job: str, *, interval: str = "2s", data: dict[str, Any] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"interval": interval, "job": {"class": job, "data": data or {}},
                     "podTemplate": template(), "dsnSecretRef": {"name": SECRET}, **spec}}


def exclusive(name: str, job: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"job": {"class": job, "data": data}, "podTemplate": template(),
                     "dsnSecretRef": {"name": SECRET}}}


def run_pods(cluster: Cluster, owner: str) -> list[dict[str, Any]]:
    return [p for p in cluster.api.list("pods", NAMESPACE, labels=runpods.POD_RUN_LABEL)
            if p["metadata"]["ownerReferences"][0]["name"] == owner]


def started_pods(cluster: Cluster, owner: str) -> set[str]:
    """Every pod of ``owner`` the kubelet ever started (pruned ones included)."""
    return {name for name in list(cluster.kubelet.pods) if name.startswith(f"{owner}-")}


def jobs_of(cluster: Cluster, schedule_name: str) -> list[JobRecord]:
    return [j for j in cluster.client.jobs(limit=1000) if j.schedule_name == schedule_name]


def test_one_pod_and_one_job_per_slot_across_two_operators_with_history_pruned(
        cluster: Cluster) -> None:
    cluster.operators.append(cluster.start(cluster.api, **OPERATOR_ENV))
    cluster.api.create(schedule("tick", "tests.support.testjobs:Record",
                                successfulJobsHistoryLimit=2))
    # successfulJobsHistoryLimit trims the completed job rows too: count runs by the
    # jobs' own audit rows, which outlive the rows.
    cluster.wait(lambda: len(audit_rows(cluster.dsn, "ran")) >= 4, timeout=120,
                 what="four slots run to completion in pods")
    jobs = jobs_of(cluster, "default/tick")
    keys = [j.unique_key for j in jobs]
    assert len(keys) == len(set(keys))  # one job per slot
    started = started_pods(cluster, "tick")
    for job in jobs:
        assert job.pod_run == "JobSchedule/default/tick"
        if job.status is JobStatus.COMPLETED:
            assert job.claimed_by in started  # run-job ran it, named after its pod
            assert job.attempts == 1
    # One pod per job: every started pod belongs to a different job.
    owners = [cluster.kubelet.process(name).env["JOBWARDEN_JOB_ID"] for name in started]
    assert len(owners) == len(set(owners))
    ran_ids = [r[0] for r in audit_rows(cluster.dsn, "ran")]
    assert len(ran_ids) == len(set(ran_ids))  # no job ran twice
    assert {str(i) for i in ran_ids} <= set(owners)  # each ran in a pod of its own
    # The history limit keeps the two newest succeeded pods.
    cluster.wait(lambda: len([p for p in run_pods(cluster, "tick")
                              if p.get("status", {}).get("phase") == "Succeeded"
                              and not p["metadata"].get("deletionTimestamp")]) <= 2
                 and len(started_pods(cluster, "tick")) > 3, timeout=60,
                 what="succeeded pods pruned to the history limit")
    status = cluster.api.wait_for("js", "tick", NAMESPACE, timeout=30,
                                  condition=lambda o: bool(o.get("status", {}).get("lastPod")))
    assert status["status"]["lastPod"].startswith("tick-")
    assert sum((o.metric("jobwarden_pod_runs_total", kind="JobSchedule",
                         resource="default/tick") or 0) for o in cluster.operators) >= 4


@pytest.mark.parametrize(("job", "after"), [
    ("tests.support.testjobs:Sleepy", JobStatus.COMPLETED),
    ("tests.support.testjobs:SleepyOnce", JobStatus.INTERRUPTED),
], ids=["idempotent-retried", "non-idempotent-interrupted"])
def test_a_pod_killed_mid_run_ends_by_the_dead_worker_rules(cluster: Cluster, job: str,
                                                           after: JobStatus) -> None:
    cluster.api.create(exclusive("killed", job, {"seconds": 4}))
    xj = cluster.api.wait_for("xj", "killed", NAMESPACE, timeout=60,
                              condition=lambda o: bool(o.get("status", {}).get("jobId")))
    job_id = int(xj["status"]["jobId"])
    first = cluster.wait(lambda: next(iter(started_pods(cluster, "killed")), None), timeout=60,
                         what="the pod started")
    cluster.wait(lambda: any(r[0] == job_id for r in audit_rows(cluster.dsn, "start")),
                 timeout=60,
                 what="the job began in the pod")
    cluster.kubelet.kill(first)  # SIGKILL: no outcome recorded
    final = cluster.wait(lambda: (j := cluster.client.job(job_id)).status is after and j,
                         timeout=90, what=f"the job {after.value}")
    assert final.last_error is not None and "pod killed" in final.last_error
    starts = [r for r in audit_rows(cluster.dsn, "start") if r[0] == job_id]
    if after is JobStatus.COMPLETED:
        assert final.attempts == 2 and len(starts) == 2
        assert len(started_pods(cluster, "killed")) == 2  # a new pod for the retry
    else:
        assert len(starts) == 1  # never started twice
        assert started_pods(cluster, "killed") == {first}
    cluster.api.wait(lambda: "PodKilled" in {
        e["reason"] for e in cluster.api.events(NAMESPACE, involved="killed")},
        what="the PodKilled event")


def test_replace_stops_the_old_pod_before_the_new_run_starts(cluster: Cluster) -> None:
    """The run ignores cancel requests (it never heartbeats): only stopping its pod ends it."""
    cluster.api.create(schedule("replaced", "tests.support.podrunjobs:Stubborn",
                                interval="8s", data={"seconds": 120},
                                concurrencyPolicy="Replace"))
    def started() -> list[JobRecord]:
        # A run replaced while it still waited (pending) never started: left out.
        return sorted((j for j in jobs_of(cluster, "default/replaced")
                       if j.heartbeat_at is not None), key=lambda j: j.id)

    jobs = cluster.wait(lambda: len(found := started()) >= 2
                        and found[0].status is JobStatus.CANCELLED and found, timeout=150,
                        what="the first run stopped and a later one started")
    old, new = jobs[0], jobs[1]
    assert old.finished_at is not None and new.heartbeat_at is not None
    assert old.finished_at <= new.heartbeat_at  # the new run started after the old ended
    # Stopped by its pod's deletion: run-job records it on SIGTERM (else the operator does,
    # with the cause "replaced", once the pod is gone).
    assert old.last_error is not None and ("SIGTERM" in old.last_error
                                           or "replaced" in old.last_error)
    events = {e["reason"] for e in cluster.api.events(NAMESPACE, involved="replaced")}
    assert "StoppingPod" in events
    old_pod = next(name for name in started_pods(cluster, "replaced")
                   if cluster.kubelet.process(name).env["JOBWARDEN_JOB_ID"] == str(old.id))
    assert cluster.kubelet.process(old_pod).proc.poll() is not None  # the old pod ended
    assert not [r for r in audit_rows(cluster.dsn, "end") if r[0] == old.id]  # stopped early
    assert [r for r in audit_rows(cluster.dsn, "start") if r[0] == old.id]


def claim_token(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT claim_token::text FROM jobwarden.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.serial
def test_a_claim_an_operator_crash_left_without_a_pod_gets_it_from_the_next_operator(
        cluster: Cluster) -> None:
    """SIGKILL of the operator between its claim and the pod's creation: the next operator
    creates the pod with the claim's own id and token, and the job runs once."""
    refusing = threading.Event()
    refusing.set()  # every pod create fails (503) until cleared: the claim has no pod
    cluster.api.emulator["create", kmock.resource("", "v1", "pods"), refusing] << 503
    crashed = cluster.operator
    cluster.api.create(exclusive("orphan", "tests.support.testjobs:SleepyOnce",
                                 {"seconds": 0.5}))
    xj = cluster.api.wait_for("xj", "orphan", NAMESPACE, timeout=60,
                              condition=lambda o: bool(o.get("status", {}).get("jobId")))
    job_id = int(xj["status"]["jobId"])
    name = f"orphan-j{job_id}-1"
    cluster.wait(lambda: f"creating pod {name} for job {job_id} failed" in crashed.logs(),
                 timeout=60, what="the operator claimed the run and failed to create its pod")
    crashed.proc.kill()  # the logged point: claimed, no pod
    crashed.proc.wait(timeout=30)
    claimed = cluster.client.job(job_id)
    assert claimed.status is JobStatus.PROCESSING and claimed.heartbeat_at is None
    assert claimed.claimed_by == podrunning.claimant_of("default") and claimed.attempts == 1
    token = claim_token(cluster.dsn, job_id)
    assert not run_pods(cluster, "orphan")

    refusing.clear()
    cluster.operators.append(cluster.start(cluster.api, **OPERATOR_ENV))
    done = cluster.wait(lambda: (j := cluster.client.job(job_id)).status is JobStatus.COMPLETED
                        and j, timeout=120, what="the job completed in the re-created pod")
    assert done.attempts == 1 and done.claimed_by == name  # the same claim, run by that pod
    assert started_pods(cluster, "orphan") == {name}
    assert cluster.kubelet.process(name).env["JOBWARDEN_CLAIM_TOKEN"] == token
    assert [r[0] for r in audit_rows(cluster.dsn, "start")].count(job_id) == 1  # ran once
    assert [r[0] for r in audit_rows(cluster.dsn, "end")].count(job_id) == 1
    events = cluster.api.events(NAMESPACE, involved="orphan")
    assert "PodRecreated" in {e["reason"] for e in events}
