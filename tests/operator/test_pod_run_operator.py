"""Runs in pods of their own through the real operator, the emulated API and PostgreSQL.

No kubelet here: the emulated API keeps every pod Pending, which is exactly a
pod that never starts. The emulator tier with a process kubelet (tests/e2e) and
the real control plane (tests/cluster) run the pods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import kmock
import psycopg

from jobwarden.api.client import Client
from jobwarden.controller.podruns import pods as runpods
from jobwarden.controller.podruns import reconciler as podruns
from jobwarden.structs.states import JobStatus
from tests.operator.conftest import OperatorProcess
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

TEMPLATE = """
  podTemplate:
    metadata: {labels: {team: billing}}
    spec:
      containers:
        - name: job
          image: example/jobs:1
          resources: {limits: {memory: 64Mi}}
  dsnSecretRef: {name: jobwarden-dsn}
"""
SCHEDULE = """
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {name: export}
spec:
  interval: 2s
  job: {class: "tests.support.testjobs:Noop"}
  startDeadlineSeconds: 10
""" + TEMPLATE
EXCLUSIVE = """
apiVersion: jobwarden.io/v1alpha1
kind: ExclusiveJob
metadata: {name: migrate}
spec:
  job: {class: "tests.support.testjobs:Noop"}
  concurrencyKey: schema-lock
  lease: {onBusy: defer}
""" + TEMPLATE


def run_pods(api: KubeAPI, kind: str | None = None) -> list[dict[str, Any]]:
    pods = api.list("pods", "default", labels=runpods.POD_RUN_LABEL)
    return [p for p in pods if kind is None
            or p["metadata"]["labels"].get(runpods.KIND_LABEL) == kind]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_one_pod_per_slot_across_two_operators_and_a_pod_that_never_starts_is_reported(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operators = [start_operator(kube_api), start_operator(kube_api)]
    kubectl.apply(SCHEDULE)
    pods = wait_for(lambda: len(run_pods(kube_api)) >= 3 and run_pods(kube_api), timeout=40,
                    message="three slots' pods")
    jobs = {j.id: j for j in client.jobs(limit=1000) if j.schedule_name == "default/export"}
    by_job: dict[int, list[str]] = {}
    for pod in pods:
        job_id = int(env_of(pod)["JOBWARDEN_JOB_ID"])
        by_job.setdefault(job_id, []).append(pod["metadata"]["name"])
        job = jobs.get(job_id) or client.job(job_id)
        assert job.pod_run == "JobSchedule/default/export"
        assert pod["metadata"]["name"] == runpods.pod_name(
            runpods.Owner(kind="JobSchedule", namespace="default", name="export",
                          uid=pod["metadata"]["labels"][runpods.POD_RUN_LABEL]),
            runpods.Run(job_id=job_id, attempt=1, claim_token="", slot=_slot(job.unique_key)))
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["metadata"]["labels"]["team"] == "billing"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "JobSchedule"
    # One pod per job (each slot's job was claimed by one of the two operators).
    assert all(len(names) == 1 for names in by_job.values()), by_job
    slots = [jobs[j].unique_key for j in by_job if j in jobs]
    assert len(set(slots)) == len(slots)
    claimed = [client.job(j) for j in by_job]
    assert all(j.claimed_by == podruns.claimant_of("default") for j in claimed
               if j.status is JobStatus.PROCESSING)
    obj = kube_api.wait_for("js", "export", timeout=20,
                            condition=lambda o: len(o.get("status", {}).get("activePods", []))
                            >= 2)
    assert obj["status"]["lastPod"] in {p["metadata"]["name"] for p in run_pods(kube_api)}

    # Nothing starts the pods: at the start deadline each one is deleted, its job goes
    # back to pending (it never ran), the cause is in its error and in an Event.
    first = min(by_job)
    failed = wait_for(lambda: (job := client.job(first)).last_error and job, timeout=40,
                      message="the first job's pod judged at its start deadline")
    assert "start_deadline" in failed.last_error
    assert failed.status in (JobStatus.PENDING, JobStatus.PROCESSING)  # retried: a new pod
    assert by_job[first][0] not in {p["metadata"]["name"] for p in run_pods(kube_api)
                                    if not p["metadata"].get("deletionTimestamp")}
    kube_api.wait(lambda: "PodStartDeadlineExceeded" in {
        e["reason"] for e in kube_api.events("default", involved="export")}, what="the event")
    retry = runpods.pod_name(
        runpods.Owner(kind="JobSchedule", namespace="default", name="export",
                      uid=obj["metadata"]["uid"]),
        runpods.Run(job_id=first, attempt=2, claim_token="", slot=_slot(failed.unique_key)))
    wait_for(lambda: retry in {p["metadata"]["name"] for p in run_pods(kube_api)}, timeout=30,
             message="the retry's pod (attempt 2)")
    assert sum((o.metric("jobwarden_pod_run_failures_total", kind="JobSchedule",
                         cause="start_deadline") or 0) for o in operators) >= 1


def test_an_exclusive_job_in_a_pod_defers_while_its_key_is_held_without_a_pod(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    holder = client.lease("key:schema-lock", ttl=60, owner="someone-else").acquire()
    kubectl.apply(EXCLUSIVE)
    deferred = kube_api.wait_for("xj", "migrate", timeout=30,
                                 condition=lambda o: o.get("status", {}).get("deferrals", 0) >= 1)
    assert deferred["status"]["attempts"] == 0
    assert run_pods(kube_api) == []
    job = client.job(int(deferred["status"]["jobId"]))
    assert job.pod_run == "ExclusiveJob/default/migrate"
    assert operator.metric("jobwarden_pod_runs_total", kind="ExclusiveJob",
                           resource="default/migrate") == 0.0

    holder.release()
    pods = wait_for(lambda: run_pods(kube_api, "ExclusiveJob"), timeout=60,
                    message="the pod once the key is free")
    (pod,) = pods
    env = env_of(pod)
    assert env["JOBWARDEN_JOB_ID"] == str(job.id)
    assert int(env["JOBWARDEN_LEASE_TOKEN"]) > holder.token
    running = client.job(job.id)
    assert running.status is JobStatus.PROCESSING and running.attempts == 1
    assert running.lease_token == int(env["JOBWARDEN_LEASE_TOKEN"])
    assert running.claimed_by == podruns.claimant_of("default")


def _slot(unique_key: str | None) -> Any:
    from jobwarden.structs.podruns import slot_of
    return slot_of("default/export", unique_key)


def fail_pod(api: KubeAPI, pod: dict[str, Any]) -> None:
    """What a kubelet reports when the container dies without its job recording an outcome."""
    stamp = "2026-11-30T00:00:00Z"
    api.patch("pods", pod["metadata"]["name"], {"status": {
        "phase": "Failed", "containerStatuses": [{
            "name": "job", "ready": False, "restartCount": 0, "image": "example/jobs:1",
            "imageID": "", "state": {"terminated": {
                "exitCode": 137, "reason": "Error", "startedAt": stamp,
                "finishedAt": stamp}}}]}}, subresource="status")


def test_an_exclusive_job_keeps_its_newest_failed_pod_by_default(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    """failedJobsHistoryLimit defaults to 1 (CronJob's): each retry is a new pod, and the
    pods of the earlier failed attempts are deleted, the newest failed one is kept."""
    start_operator(kube_api)
    kubectl.apply(EXCLUSIVE.replace('job: {class: "tests.support.testjobs:Noop"}',
                                    'job: {class: "tests.support.testjobs:Noop", '
                                    'maxRetries: 2}'))
    failed: list[str] = []
    for attempt in (1, 2, 3):
        pod = wait_for(lambda a=attempt: next(  # type: ignore[misc]
            (p for p in run_pods(kube_api, "ExclusiveJob")
             if p["metadata"]["labels"][runpods.ATTEMPT_LABEL] == str(a)), None),
            timeout=40, message=f"the pod of attempt {attempt}")
        fail_pod(kube_api, pod)
        failed.append(pod["metadata"]["name"])
    xj = kube_api.wait_for("xj", "migrate", timeout=30,
                           condition=lambda o: o.get("status", {}).get("phase") == "Failed")
    job = client.job(int(xj["status"]["jobId"]))
    assert job.status is JobStatus.FAILED and job.attempts == 3
    assert job.last_error is not None and "pod killed" in job.last_error

    def kept() -> list[str]:
        return sorted(p["metadata"]["name"] for p in run_pods(kube_api, "ExclusiveJob")
                      if not p["metadata"].get("deletionTimestamp"))

    wait_for(lambda: kept() == [failed[-1]], timeout=30,
             message="only the newest failed pod kept (failedJobsHistoryLimit 1)")


def test_an_exclusive_jobs_history_limits_are_its_own(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    """failedJobsHistoryLimit: 0 deletes every failed attempt's pod; 5 would keep them."""
    start_operator(kube_api)
    kubectl.apply(EXCLUSIVE.replace('job: {class: "tests.support.testjobs:Noop"}',
                                    'job: {class: "tests.support.testjobs:Noop", '
                                    'maxRetries: 1}\n  failedJobsHistoryLimit: 0'))
    for attempt in (1, 2):
        pod = wait_for(lambda a=attempt: next(  # type: ignore[misc]
            (p for p in run_pods(kube_api, "ExclusiveJob")
             if p["metadata"]["labels"][runpods.ATTEMPT_LABEL] == str(a)), None),
            timeout=40, message=f"the pod of attempt {attempt}")
        fail_pod(kube_api, pod)
    kube_api.wait_for("xj", "migrate", timeout=30,
                      condition=lambda o: o.get("status", {}).get("phase") == "Failed")
    wait_for(lambda: not [p for p in run_pods(kube_api, "ExclusiveJob")
                          if not p["metadata"].get("deletionTimestamp")], timeout=30,
             message="every failed pod deleted (failedJobsHistoryLimit 0)")


def test_a_claim_without_a_pod_past_its_start_deadline_gets_no_pod_and_is_reaped(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client, dsn: str,
        start_operator: Callable[..., OperatorProcess]) -> None:
    """An operator killed between claim and create, restarted after the claim's start
    deadline: no pod for that claim (the reaper's); the run is retried as a new claim."""
    refusing = threading.Event()
    refusing.set()
    kube_api.emulator["create", kmock.resource("", "v1", "pods"), refusing] << 503
    crashed = start_operator(kube_api)
    kubectl.apply(EXCLUSIVE)
    xj = kube_api.wait_for("xj", "migrate", timeout=30,
                           condition=lambda o: bool(o.get("status", {}).get("jobId")))
    job_id = int(xj["status"]["jobId"])
    wait_for(lambda: f"for job {job_id} failed" in crashed.logs(), timeout=30,
             message="the claim made and its pod's create refused")
    crashed.proc.kill()
    crashed.proc.wait(timeout=30)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the claim is past its deadline
        conn.execute("UPDATE jobwarden.jobs SET claimed_at = now() - interval '1 hour' "
                     "WHERE id = %s AND status = 'processing'", (job_id,))
    refusing.clear()
    restarted = start_operator(kube_api)
    wait_for(lambda: (restarted.metric("jobwarden_operator_reconciles_total",
                                       kind="ExclusiveJob", result="unchanged") or 0) >= 3,
             timeout=30,
             message="the restarted operator reconciled the ExclusiveJob a few times")
    assert run_pods(kube_api) == []  # no pod for a claim past its start deadline
    assert client.job(job_id).status is JobStatus.PROCESSING  # left to the reaper

    with psycopg.connect(dsn, autocommit=True) as conn:  # the reaper's moment comes
        conn.execute("UPDATE jobwarden.jobs SET claim_expires_at = now() - interval '1 second' "
                     "WHERE id = %s", (job_id,))
    (pod,) = wait_for(lambda: run_pods(kube_api), timeout=40,
                      message="the retry's pod, under a new claim")
    assert pod["metadata"]["labels"][runpods.ATTEMPT_LABEL] == "2"
    job = client.job(job_id)
    assert job.attempts == 2 and job.last_error is not None and "did not start" in job.last_error
