"""``python -m bench.cronjob plane``: the real control plane half (see bench/cronjob.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.cronjob import figures
from jobwarden.api.client import Client
from jobwarden.db.database import Database
from tests.cluster import tools
from tests.cluster.conftest import RealCluster, open_cluster, started_plane
from tests.e2e import podrunscenarios as scenarios

NAMESPACE = "cronjob"
SCHEDULE = "start-clock"
CRONJOB = "start-clock-cj"
CRON = "* * * * *"
#: What the controller manager runs besides the harness's controllers.
CONTROLLERS = ("cronjob-controller", "job-controller")
#: Killed this long before a slot (its boundary).
BEFORE_SLOT = 1.0


def job_schedule(namespace: str) -> dict[str, Any]:
    template = scenarios.template(env=[{"name": "JOBWARDEN_APPS",
                                        "value": "tests.support.startclockjob"}])
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": SCHEDULE, "namespace": namespace},
            "spec": {"schedule": CRON, "job": {"class": "tests.support.startclockjob:StartClock",
                                               "data": {}},
                     "podTemplate": template, "dsnSecretRef": {"name": "db"},
                     "successfulJobsHistoryLimit": 100}}


def cron_job(namespace: str) -> dict[str, Any]:
    """The CronJob a user would write for the same code: ``python -m`` of the program."""
    container = {"name": "job", "image": "example/jobs:1",
                 "command": ["python", "-m", "tests.support.startclock"],
                 "env": [{"name": "POD_NAME",
                          "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": CRONJOB, "namespace": namespace},
            "spec": {"schedule": CRON, "successfulJobsHistoryLimit": 100,
                     "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
                         "containers": [container]}}}}}}


def next_slot(after: float) -> float:
    return math.ceil(after / 60.0) * 60.0


def _sleep_until(at: float) -> None:
    while (left := at - time.time()) > 0:
        time.sleep(min(left, 5.0))


def runs_by_slot(dsn: str, spawned: dict[str, float]
                 ) -> dict[str, dict[float, list[dict[str, float]]]]:
    """Every recorded start of job code, by kind and slot (epoch seconds): its lateness,
    when the kubelet spawned its pod's process (``spawned``: by pod name), and for the
    JobSchedule the claim's (``claimed_at`` of the job row)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        clocks = conn.execute("SELECT kind, pod, job_id, at FROM public.startclock").fetchall()
        jobs = {int(r[0]): (str(r[1]), r[2]) for r in conn.execute(
            "SELECT id, unique_key, extract(epoch FROM claimed_at)::float8 "
            "FROM jobwarden.jobs WHERE unique_key IS NOT NULL").fetchall()}
    found: dict[str, dict[float, list[dict[str, float]]]] = {"cronjob": {}, "jobschedule": {}}
    for kind, pod, job_id, at in clocks:
        if kind == "program":  # <cronjob>-<minutes since the epoch>-<suffix>
            slot = float(int(str(pod).rsplit("-", 2)[-2]) * 60)
            run = {"code": round(at - slot, 3)}
            found["cronjob"].setdefault(slot, []).append(run)
        else:
            key, claimed = jobs[int(job_id)]
            slot = dt.datetime.fromisoformat(key.split(":", 1)[1]).timestamp()
            run = {"code": round(at - slot, 3)}
            if claimed is not None:
                run.update(claim=round(claimed - slot, 3), claim_to_code=round(at - claimed, 3))
                if pod in spawned:
                    run["claim_to_spawn"] = round(spawned[pod] - claimed, 3)
            found["jobschedule"].setdefault(slot, []).append(run)
        if pod in spawned:
            run.update(spawn=round(spawned[pod] - slot, 3),
                       spawn_to_code=round(at - spawned[pod], 3))
    return found


def measure(dsn: str, *, slots: int, restarts: bool, workdir: Path,
            operator_env: dict[str, str] | None) -> dict[str, Any]:
    reports = io.StringIO()
    events: list[dict[str, Any]] = []
    with Database(dsn, min_size=1, max_size=4) as db, contextlib.ExitStack() as stack:
        plane = stack.enter_context(started_plane(tools.kube_tools(), workdir / "plane",
                                                  controllers=CONTROLLERS))
        # open_cluster prints every pod's log at exit: kept out of the bench's output.
        stack.enter_context(contextlib.redirect_stdout(reports))
        cluster = stack.enter_context(open_cluster(
            plane, namespace=NAMESPACE, dsn=dsn, client=Client(database=db), workdir=workdir))
        values = cluster.base_values()
        if operator_env is not None:  # None: the harness's test timings
            values["operator"]["extraEnv"] = [{"name": k, "value": v}
                                              for k, v in operator_env.items()]
        cluster.install(values=values)
        cluster.site()  # the DSN Secret the JobSchedule names
        cluster.api.create(job_schedule(NAMESPACE))
        cluster.api.create(cron_job(NAMESPACE))
        first = next_slot(time.time() + 10)
        steady = [first + 60 * i for i in range(slots)]
        boundary: dict[str, float] = {}
        if restarts:
            boundary = {"operator": steady[-1] + 60, "controller-manager": steady[-1] + 180}
        end = max([*steady, *boundary.values()]) + 90
        for what, slot in sorted(boundary.items(), key=lambda item: item[1]):
            _sleep_until(slot - BEFORE_SLOT)
            events.append({"restart": what, "slot": slot, **_restart(what, cluster)})
        _sleep_until(end)
        offset = time.time() - time.monotonic()
        spawned = {name: p.started_at + offset for name, p in list(cluster.kubelet.pods.items())}
        found = runs_by_slot(dsn, spawned)
    result: dict[str, Any] = {"schedule": CRON, "slots": {}, "events": events}
    for kind, by_slot in found.items():
        runs = [r for s in steady for r in by_slot.get(s, [])]
        result[kind] = {
            "slot_to_code": figures([r["code"] for r in runs]),
            "slot_to_spawn": figures([r["spawn"] for r in runs if "spawn" in r]),
            "spawn_to_code": figures([r["spawn_to_code"] for r in runs if "spawn_to_code" in r]),
            "missed": sum(1 for s in steady if not by_slot.get(s)),
            "doubled": sum(1 for s in steady if len(by_slot.get(s, [])) > 1)}
        if kind == "jobschedule":
            result[kind]["slot_to_claim"] = figures([r["claim"] for r in runs if "claim" in r])
            result[kind]["claim_to_code"] = figures([r["claim_to_code"] for r in runs
                                                     if "claim_to_code" in r])
            result[kind]["claim_to_spawn"] = figures([r["claim_to_spawn"] for r in runs
                                                      if "claim_to_spawn" in r])
        for what, slot in boundary.items():
            result[kind][f"restart_{what}"] = {"runs": len(by_slot.get(slot, [])),
                                               "late": [r["code"] for r in by_slot.get(slot, [])]}
        result["slots"][kind] = {str(int(s)): v for s, v in sorted(by_slot.items())}
    if result["cronjob"]["slot_to_code"].get("p50") and \
            result["jobschedule"]["slot_to_code"].get("p50"):
        result["ratio_p50_jobschedule_to_cronjob"] = round(
            result["jobschedule"]["slot_to_code"]["p50"]
            / result["cronjob"]["slot_to_code"]["p50"], 2)
    return result


def _restart(what: str, cluster: RealCluster) -> dict[str, Any]:
    """Kill the operator's process (the kubelet restarts it) or the controller manager's
    (started again at once); what was done, when."""
    killed_at = time.time()
    if what == "operator":
        pod = next(p for p in cluster.kubelet.pods.values()
                   if p.container == "operator" and not p.removed and p.proc.poll() is None)
        cluster.kubelet.kill(pod.name)
        back: Callable[[], bool] = lambda: pod.restarts > 0 and pod.ready  # noqa: E731
    else:
        cluster.plane.restart("kube-controller-manager")
        back = lambda: True  # noqa: E731
    with contextlib.suppress(AssertionError):
        cluster.wait(back, timeout=60, what=f"{what} running again")
    return {"killed_at": round(killed_at, 3),
            "running_again_after": round(time.time() - killed_at, 3)}
