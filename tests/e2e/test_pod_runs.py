"""Runs in pods of their own, end to end on the emulated API: the operator claims, the
process kubelet runs `jobwarden run-job` in each pod, the job's outcome is recorded under
the pod's claim.

Every pod the operator creates becomes a real `python -m jobwarden run-job` process
(tests/e2e/kubelet.py); killing that process with SIGKILL is a pod whose container
died without recording an outcome. The scenarios both tiers run are in
tests/e2e/podrunscenarios.py, shared with the real control plane's tier
(tests/cluster/test_pod_run_scenarios_on_cluster.py).
"""

from __future__ import annotations

import os
import threading

import kmock
import psycopg
import pytest

from jobwarden.controller.podruns import reconciler as podruns
from jobwarden.structs.schedules import ScheduleRecord
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.e2e import podrunscenarios as scenarios
from tests.e2e.conftest import NAMESPACE, OPERATOR_ENV, Cluster

pytestmark = pytest.mark.slow

#: The scenarios the real control plane's tier also runs, with the same code: where that
#: tier runs (the kube tools are built: the test command exports their directory), the
#: emulator's copy proves nothing more and only lengthens the run. Without Go they run
#: here, so every machine runs them once.
on_the_real_plane = pytest.mark.skipif(
    bool(os.environ.get("JOBWARDEN_KUBE_TOOLS_BIN")),
    reason="runs on the real control plane here (tests/cluster/"
           "test_pod_run_scenarios_on_cluster.py)")


def test_one_pod_and_one_job_per_slot_across_two_operators_with_history_pruned(
        cluster: Cluster) -> None:
    cluster.operators.append(cluster.start(cluster.api, **OPERATOR_ENV))
    scenarios.one_pod_and_one_job_per_slot([cluster.site], "tick")


@on_the_real_plane
@pytest.mark.parametrize(("job", "after"), [
    ("tests.support.testjobs:Sleepy", JobStatus.COMPLETED),
    ("tests.support.testjobs:SleepyOnce", JobStatus.INTERRUPTED),
], ids=["idempotent-retried", "non-idempotent-interrupted"])
def test_a_pod_killed_mid_run_ends_by_the_dead_worker_rules(cluster: Cluster, job: str,
                                                           after: JobStatus) -> None:
    scenarios.killed_mid_run(cluster.site, job, after)


@on_the_real_plane
def test_replace_stops_the_old_pod_before_the_new_run_starts(cluster: Cluster) -> None:
    scenarios.replace_stops_the_old_pod_first(cluster.site)


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
    site = cluster.site
    refusing = threading.Event()
    refusing.set()  # every pod create fails (503) until cleared: the claim has no pod
    cluster.api.emulator["create", kmock.resource("", "v1", "pods"), refusing] << 503
    crashed = cluster.operator
    cluster.api.create(scenarios.exclusive(site, "orphan", "tests.support.testjobs:SleepyOnce",
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
    assert claimed.claimed_by == podruns.claimant_of("default") and claimed.attempts == 1
    token = claim_token(cluster.dsn, job_id)
    assert not scenarios.run_pods(site, "orphan")

    refusing.clear()
    cluster.operators.append(cluster.start(cluster.api, **OPERATOR_ENV))
    done = cluster.wait(lambda: (j := cluster.client.job(job_id)).status is JobStatus.COMPLETED
                        and j, timeout=120, what="the job completed in the re-created pod")
    assert done.attempts == 1 and done.claimed_by == name  # the same claim, run by that pod
    assert scenarios.started_pods(site, "orphan") == {name}
    assert cluster.kubelet.process(name).env["JOBWARDEN_CLAIM_TOKEN"] == token
    assert [r[0] for r in audit_rows(cluster.dsn, "start")].count(job_id) == 1  # ran once
    assert [r[0] for r in audit_rows(cluster.dsn, "end")].count(job_id) == 1
    events = cluster.api.events(NAMESPACE, involved="orphan")
    assert "PodRecreated" in {e["reason"] for e in events}


def test_each_slot_is_enqueued_and_its_pod_created_at_the_slot_not_an_interval_later(
        cluster: Cluster) -> None:
    """The operator's schedule loop passes again when the next slot is due (not only every
    ``JOBWARDEN_SCHEDULE_CHECK_SECONDS``), and a pass that enqueued a pod run wakes its
    resource, whose reconcile claims it and creates the pod (not only every
    ``JOBWARDEN_STATUS_INTERVAL``). With the check 10 s apart and the status refresh an
    hour apart, a 3 s pod-run schedule still runs slot after slot, none missed once the
    loop knows the schedule (before this, one slot in three at best, and no pod at all)."""
    for operator in cluster.operators:
        operator.stop()
    cluster.operators.append(cluster.start(
        cluster.api, JOBWARDEN_SCHEDULE_CHECK_SECONDS="10", JOBWARDEN_STATUS_INTERVAL="3600"))
    site = cluster.site
    cluster.api.create(scenarios.schedule(site, "at-the-slot", "tests.support.testjobs:Record",
                                          interval="3s"))
    row = f"{NAMESPACE}/at-the-slot"

    def first_enqueued() -> ScheduleRecord | None:
        record = site.client.schedules.get(row)
        return record if record is not None and record.enqueued_count >= 1 else None

    def completed() -> list[int]:
        done = [j.id for j in scenarios.jobs_of(site, row) if j.status == JobStatus.COMPLETED]
        return done if len(done) >= 6 else []

    # The pass that enqueued the first slot counted, in the same statement, the slots that
    # passed before the loop knew the schedule (up to one check interval of them, more
    # when the operator starts late on a loaded machine): those are the only misses.
    known = cluster.wait(first_enqueued, timeout=120, what="the first slot enqueued")
    cluster.wait(completed, timeout=120, what="six slots run in their pods")
    record = site.client.schedules.get(row)
    assert record is not None
    assert record.missed_count == known.missed_count, (known, record)
