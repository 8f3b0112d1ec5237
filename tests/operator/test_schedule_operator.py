"""JobSchedules through the real operator, the emulated API and PostgreSQL."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from jobwarden.api.client import Client
from tests.operator.conftest import OperatorProcess, condition, log_lines
from tests.support import yamlio
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

JOB = "tests.support.testjobs:Noop"
SCHEDULE = f"""
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {{name: heartbeat}}
spec:
  interval: 1s
  job: {{class: "{JOB}", data: {{count: 1}}}}
"""


#: The per-run Events (controller/jobschedules/runevents.py), between the lifecycle ones.
RUN_REASONS = ("SuccessfulCreate", "SawCompletedJob", "JobFailed", "JobCancelled",
               "JobAlreadyActive", "MissSchedule")


def slot_jobs(client: Client, name: str) -> list[Any]:
    return [j for j in client.jobs(limit=1000) if j.schedule_name == name]


def test_an_interval_schedule_is_enqueued_per_slot_updated_suspended_and_deleted(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    kubectl.apply(SCHEDULE)

    row = wait_for(lambda: client.schedules.get("default/heartbeat"), timeout=20,
                   message="the schedule row")
    assert (row.interval, row.job_class, row.data, row.source) == (
        "1s", JOB, {"count": 1}, "kubernetes:default")
    jobs = wait_for(lambda: len(slot_jobs(client, "default/heartbeat")) >= 3
                    and slot_jobs(client, "default/heartbeat"), timeout=20,
                    message="three slots enqueued")
    keys = [j.unique_key for j in jobs]
    assert len(set(keys)) == len(keys)  # one job per slot
    assert all(k.startswith("default/heartbeat:") for k in keys)

    obj = kube_api.wait_for("js", "heartbeat", timeout=10, condition=lambda o: o.get(
        "status", {}).get("counts", {}).get("enqueued", 0) >= 3)
    status = obj["status"]
    assert status["lastSlot"] < status["nextRun"]
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Conflicting")["status"] == "False"
    assert condition(obj, "Suspended")["status"] == "False"
    assert status["observedGeneration"] == 1
    assert status["lastJob"]["id"] in {str(j.id) for j in slot_jobs(client, "default/heartbeat")}
    table = kubectl("get", "js", "heartbeat")
    assert "heartbeat" in table and "True" in table

    # update: the row follows the spec
    kubectl.apply(SCHEDULE.replace("interval: 1s", "interval: 2s").replace("count: 1", "count: 2"))
    wait_for(lambda: client.schedules.get("default/heartbeat").interval == "2s", timeout=20,
             message="the row updated")
    wait_for(lambda: any(j.data == {"count": 2} for j in slot_jobs(client, "default/heartbeat")),
             timeout=20, message="a job with the new data")

    # suspend: no new slots while runner passes go on
    kubectl("patch", "js", "heartbeat", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    suspended = kube_api.wait_for("js", "heartbeat", timeout=20, condition=lambda o: condition(
        o, "Suspended").get("status") == "True")
    assert "nextRun" not in suspended["status"]
    assert client.schedules.get("default/heartbeat").suspended
    before = len(slot_jobs(client, "default/heartbeat"))
    passes = operator.metric("jobwarden_schedule_runs_total", result="ok") or 0.0
    wait_for(lambda: (operator.metric("jobwarden_schedule_runs_total", result="ok") or 0)
             >= passes + 15, timeout=20, message="15 more runner passes (3 s of slots)")
    assert len(slot_jobs(client, "default/heartbeat")) == before

    reasons = kube_api.wait(lambda: (r := [e["reason"] for e in kube_api.events(
        "default", involved="heartbeat") if e["reason"] not in RUN_REASONS])
        and "Suspended" in r and r, what="events")
    assert reasons[:2] == ["Created", "Updated"]  # the spec change, then the suspension
    assert reasons.count("Created") == 1 and "InvalidSpec" not in reasons

    # delete: not blocked by a finalizer; the observed deletion removes the row
    assert not kube_api.get("js", "heartbeat")["metadata"].get("finalizers")
    kubectl("delete", "js", "heartbeat")
    assert kube_api.get("js", "heartbeat") is None
    wait_for(lambda: client.schedules.get("default/heartbeat") is None, timeout=20,
             message="the row deleted after the resource")
    assert operator.metric("jobwarden_operator_reconciles_total", kind="JobSchedule",
                           result="created") == 1.0
    assert operator.metric("jobwarden_operator_reconciles_total", kind="JobSchedule",
                           result="deleted") == 1.0


def test_an_invalid_schedule_is_not_ready_and_changes_nothing(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client, dsn: str,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    kubectl.apply(SCHEDULE.replace("interval: 1s", 'schedule: "*/5 * * * * *"'))
    kubectl.apply(SCHEDULE.replace("name: heartbeat", "name: zoned").replace(
        "interval: 1s", 'schedule: "0 2 * * *"\n  timeZone: Europe/Berlinn'))
    for name, field in (("heartbeat", "spec.schedule"), ("zoned", "spec.timeZone")):
        obj = kube_api.wait_for("js", name, timeout=20,
                                condition=lambda o: bool(condition(o, "Ready")))
        ready = condition(obj, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert ready["message"].startswith(field)
        events = kube_api.wait(lambda n=name: kube_api.events("default", involved=n))
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InvalidSpec")]
    assert client.schedules.list() == []
    assert client.jobs() == []
    assert operator.metric("jobwarden_operator_reconciles_total", kind="JobSchedule",
                           result="invalid")
    assert operator.get("/healthz")[0] == 200 and operator.get("/readyz")[0] == 200
    # The DSN never shows: not in logs, Events, status or metrics.
    shown = [operator.logs(), operator.get("/metrics")[1], str(kube_api.events("default")),
             str(kube_api.list("js", "default"))]
    assert not [text for text in shown if dsn in text]


def test_two_clusters_on_one_database_run_one_schedule_and_report_a_conflict(
        kube_api_factory: Callable[[str], KubeAPI], client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    east, west = kube_api_factory("east"), kube_api_factory("west")
    ops = [start_operator(east, cluster="east"), start_operator(west, cluster="west")]
    east.create(_manifest(SCHEDULE))
    wait_for(lambda: client.schedules.get("default/heartbeat"), timeout=20, message="row")
    west.create(_manifest(SCHEDULE))
    for api in (east, west):
        api.wait_for("js", "heartbeat", timeout=20, condition=lambda o: condition(
            o, "Ready").get("status") == "True" and o["status"].get("lastSlot"))
    assert client.schedules.get("default/heartbeat").source == "kubernetes:east"

    # A different spec for the same name in the other cluster: reported, not applied.
    east.create(_manifest(SCHEDULE.replace("heartbeat", "report")))
    wait_for(lambda: client.schedules.get("default/report"), timeout=20, message="row")
    west.create(_manifest(SCHEDULE.replace("heartbeat", "report").replace("count: 1", "count: 9")))
    conflicted = west.wait_for("js", "report", timeout=20, condition=lambda o: condition(
        o, "Conflicting").get("status") == "True")
    assert condition(conflicted, "Ready")["status"] == "False"
    assert "'east'" in condition(conflicted, "Conflicting")["message"]
    assert client.schedules.get("default/report").data == {"count": 1}

    jobs = wait_for(lambda: len(slot_jobs(client, "default/heartbeat")) >= 4
                    and slot_jobs(client, "default/heartbeat"), timeout=20, message="slots")
    per_slot = collections.Counter(j.unique_key for j in jobs)
    assert set(per_slot.values()) == {1}
    assert all(j.data == {"count": 1} for j in slot_jobs(client, "default/report"))
    # The database-wide loops run in one operator only (one lease each).
    holders = {lease.name: lease.holder_host for lease in client.db.leases.list(
        prefix="operator:")}
    assert set(holders) == {"operator:schedules", "operator:reaper"}
    assert len(client.db.leases.list(prefix="jobwarden:gauges")) == 1
    gauges = [op.metric("jobwarden_queue_depth", queue="default", status="pending")
              for op in ops]
    assert sorted(g is not None for g in gauges) == [False, True]
    # west deleting its copy leaves east's row alone
    west.delete("js", "heartbeat")
    west.wait_gone("js", "heartbeat", timeout=20)
    assert client.schedules.get("default/heartbeat") is not None
    assert all("postgresql://" not in line.get("message", "") for op in ops
               for line in log_lines(op))


def _manifest(text: str) -> dict[str, Any]:

    loaded: dict[str, Any] = yamlio.load(text)
    loaded["metadata"]["namespace"] = "default"
    return loaded



CRON_PARITY = f"""
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {{name: yearly}}
spec:
  schedule: "0 0 1 1 *"
  successfulJobsHistoryLimit: 1
  failedJobsHistoryLimit: 0
  job: {{class: "{JOB}"}}
"""


def test_cronjob_parity_run_now_active_last_success_and_history_limits(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess],
        start_worker: Callable[..., Any]) -> None:
    start_operator(kube_api)
    kubectl.apply(CRON_PARITY)
    wait_for(lambda: client.schedules.get("default/yearly"), timeout=20,
             message="the schedule row")

    # run-now by annotation: one job per distinct value, shown in status.active
    kubectl("annotate", "js", "yearly", "jobwarden.io/run-now=first")
    obj = kube_api.wait_for("js", "yearly", timeout=20, condition=lambda o: o.get(
        "status", {}).get("runNow", {}).get("request") == "first" and o["status"].get("active"))
    first = obj["status"]["runNow"]["jobId"]
    assert obj["status"]["active"] == [{"id": first, "status": "pending"}]
    assert client.job(int(first)).unique_key == "default/yearly:run-now:first"
    kubectl("annotate", "--overwrite", "js", "yearly", "jobwarden.io/run-now=second")
    obj = kube_api.wait_for("js", "yearly", timeout=20, condition=lambda o: o.get(
        "status", {}).get("runNow", {}).get("request") == "second")
    second = obj["status"]["runNow"]["jobId"]
    assert second != first
    assert len(slot_jobs(client, "default/yearly")) == 2  # a repeated pass enqueued nothing more
    assert "lastSuccessfulTime" not in obj["status"]

    # both run; the history limit keeps the newest completed job only
    start_worker()
    obj = kube_api.wait_for("js", "yearly", timeout=30, condition=lambda o: "active" not in o.get(
        "status", {}) and o["status"].get("lastSuccessfulTime"))
    wait_for(lambda: [str(j.id) for j in slot_jobs(client, "default/yearly")] == [second],
             timeout=30, message="the older completed job deleted by the history limit")
    assert client.schedules.get("default/yearly").next_slot.month == 1  # slots untouched


def test_a_schedule_deleted_while_no_operator_ran_is_swept_and_another_cluster_s_row_stays(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api)
    kubectl.apply(SCHEDULE)
    kubectl.apply(SCHEDULE.replace("name: heartbeat", "name: kept"))
    wait_for(lambda: client.schedules.get("default/heartbeat") is not None
             and client.schedules.get("default/kept") is not None, timeout=20,
             message="both rows written")
    # Another cluster's row for a schedule this cluster does not have: never swept.
    client.schedules.upsert("default/elsewhere", interval="1h", job_class=JOB,
                            source="kubernetes:other")
    operator.stop()
    kubectl("delete", "js", "heartbeat")  # no finalizer: gone at once, the row stays
    assert kube_api.get("js", "heartbeat") is None
    assert client.schedules.get("default/heartbeat") is not None

    operator = start_operator(kube_api)
    wait_for(lambda: client.schedules.get("default/heartbeat") is None, timeout=30,
             message="the orphaned row swept")
    assert client.schedules.get("default/kept") is not None
    assert client.schedules.get("default/elsewhere") is not None
    assert operator.metric("jobwarden_operator_reconciles_total", kind="JobSchedule",
                           result="swept") == 1.0
