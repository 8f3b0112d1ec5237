"""The pod-per-run scenarios of issue 18, written once for both tiers that run them.

A scenario is what must hold when a JobSchedule or ExclusiveJob runs each of its
jobs in a pod of its own; it runs on a :class:`Site` -- an API server (the kmock
emulator in tests/e2e, the real kube-apiserver in tests/cluster), the process
kubelet that turns every pod into a real `jobwarden run-job` process, the
operator(s) reconciling there, and the test's PostgreSQL database. The tests in
tests/e2e/test_pod_runs.py and tests/cluster/test_pod_run_scenarios_on_cluster.py
arrange the site (one operator or two, one cluster or two on one database) and call
the scenario; what is asserted is the same on both.

The jobs write ``public.audit`` rows (``start``, ``end``, ``ran``; tests/support) from
inside the pod, so a scenario sees what ran, how often and in which attempt, even
after a history limit deleted the job's row.
"""

from __future__ import annotations

import dataclasses
import signal
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from jobwarden.api.client import Client
from jobwarden.controller.podruns import pods as runpods
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.states import JobStatus
from tests.conftest import audit_rows
from tests.e2e.kubelet import ProcessKubelet

#: run-job's timings, through the template's env as a user would set them.
RUN_ENV = {"JOBWARDEN_HEARTBEAT_INTERVAL": "0.3", "JOBWARDEN_HEARTBEAT_GRACE": "8",
           "JOBWARDEN_STOP_GRACE": "3"}


@dataclasses.dataclass
class Site:
    """One cluster a scenario runs on (see the module docstring). ``secret`` names the
    Secret holding the database's DSN in ``namespace``; ``operator_ports`` gives the
    metrics port of every operator serving there now."""

    api: Any
    kubelet: ProcessKubelet
    client: Client
    dsn: str
    namespace: str
    secret: str
    wait: Callable[..., Any]
    operator_ports: Callable[[], list[int]]
    #: Nodes that joined during the scenario, beside ``kubelet``'s.
    more_kubelets: list[ProcessKubelet] = dataclasses.field(default_factory=list)
    #: Scale this site's operators to the given count, returning once that many run
    #: (None where the tier cannot: the emulator tier starts its operators itself).
    scale_operators: Callable[[int], None] | None = None

    @property
    def kubelets(self) -> list[ProcessKubelet]:
        return [self.kubelet, *self.more_kubelets]

    def metric(self, name: str, **labels: str) -> float:
        """One sample of ``name`` summed over this site's operators (0 where absent)."""
        return sum(scrape(port, name, **labels) for port in self.operator_ports())


def scrape(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            head, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                return float(value)
    return 0.0


# -- manifests ---------------------------------------------------------------------------

def template(*, env: Sequence[dict[str, Any]] = (), run_env: dict[str, str] | None = None,
             **pod: Any) -> dict[str, Any]:
    """A run pod's template: run-job's timings (``RUN_ENV``, ``run_env`` over it), ``env``
    added, ``pod`` fields over the pod spec's."""
    timings = {**RUN_ENV, **(run_env or {})}
    return {"metadata": {"labels": {"team": "e2e"}},
            "spec": {"terminationGracePeriodSeconds": 10, **pod, "containers": [{
                "name": "job", "image": "example/jobs:1",
                "env": [*({"name": k, "value": v} for k, v in timings.items()), *env]}]}}


def schedule(site: Site, name: str, job: str, *, interval: str = "2s",
             data: dict[str, Any] | None = None, pod: dict[str, Any] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": site.namespace},
            "spec": {"interval": interval, "job": {"class": job, "data": data or {}},
                     "podTemplate": pod or template(), "dsnSecretRef": {"name": site.secret},
                     **spec}}


def exclusive(site: Site, name: str, job: str, data: dict[str, Any] | None = None, *,
              pod: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": site.namespace},
            "spec": {"job": {"class": job, "data": data or {}},
                     "podTemplate": pod or template(),
                     "dsnSecretRef": {"name": site.secret}, **spec}}


# -- what a site shows -------------------------------------------------------------------

def run_pods(site: Site, owner: str) -> list[dict[str, Any]]:
    """The run pods of ``owner`` the API server has now (terminating ones included)."""
    return [p for p in site.api.list("pods", site.namespace, labels=runpods.POD_RUN_LABEL)
            if p["metadata"]["ownerReferences"][0]["name"] == owner]


def started_pods(site: Site, owner: str) -> set[str]:
    """Every pod of ``owner`` the site's kubelets ever started (pruned ones included)."""
    return {name for kubelet in site.kubelets for name in list(kubelet.pods)
            if name.startswith(f"{owner}-")}


def job_of_pod(site: Site, pod: str) -> int:
    kubelet = next(k for k in site.kubelets if pod in k.pods)
    return int(kubelet.process(pod).env["JOBWARDEN_JOB_ID"])


def jobs_of(site: Site, schedule_name: str) -> list[JobRecord]:
    return [j for j in site.client.jobs(limit=1000) if j.schedule_name == schedule_name]


def events(site: Site, involved: str) -> set[str]:
    return {str(e.get("reason")) for e in site.api.events(site.namespace, involved=involved)}


def audit_of(site: Site, event: str, job_id: int) -> list[tuple[Any, ...]]:
    return [r for r in audit_rows(site.dsn, event) if r[0] == job_id]


def resource(site: Site, plural: str, name: str) -> dict[str, Any]:
    return site.api.get(plural, name, site.namespace) or {}


def status(site: Site, plural: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(site, plural, name).get("status") or {}
    return found


def succeeded_alive(site: Site, owner: str) -> list[str]:
    return [p["metadata"]["name"] for p in run_pods(site, owner)
            if (p.get("status") or {}).get("phase") == "Succeeded"
            and not p["metadata"].get("deletionTimestamp")]


# -- the scenarios -----------------------------------------------------------------------

def one_pod_and_one_job_per_slot(sites: Sequence[Site], name: str, *, slots: int = 4,
                                 history: int = 2) -> None:
    """The same pod-run interval schedule on every site, all on one database, each with
    its operator(s): one job per slot, each run once, in a pod of its own on ONE site;
    every site's operators take part; succeeded pods beyond successfulJobsHistoryLimit
    are pruned on every site, oldest first.

    Which operator claims a slot is a race that the schedule loop's lease holder nearly
    always wins (it wakes its own claim the moment it enqueues), so on several sites the
    busiest site's operators go away for a while (scaled to none: their loop leases are
    released) and the others must carry the same schedule on, each past the history;
    then they come back and prune what finished while they were away."""
    first = sites[0]
    for site in sites:
        site.api.create(schedule(site, name, "tests.support.testjobs:Record",
                                 successfulJobsHistoryLimit=history))

    def past_history(site: Site) -> bool:
        return len(started_pods(site, name)) > history + 1

    def enough() -> bool:
        # successfulJobsHistoryLimit trims the completed job rows too: count runs by the
        # jobs' own audit rows, which outlive the rows.
        return len(audit_rows(first.dsn, "ran")) >= slots and any(map(past_history, sites))

    first.wait(enough, timeout=240,
               what=f"{slots} slots run in pods, one site past the history")
    if len(sites) > 1:
        busiest = max(sites, key=lambda s: len(started_pods(s, name)))
        others = [site for site in sites if site is not busiest]
        assert busiest.scale_operators is not None, "a site whose operators cannot go away"
        busiest.scale_operators(0)
        first.wait(lambda: all(map(past_history, others)), timeout=240,
                   what="the other sites carrying the schedule on, each past the history")
        busiest.scale_operators(1)
    row = f"{first.namespace}/{name}"
    pod_run = f"JobSchedule/{first.namespace}/{name}"
    jobs = jobs_of(first, row)
    keys = [j.unique_key for j in jobs]
    assert len(keys) == len(set(keys)), keys  # one job per slot
    started = {(i, pod) for i, site in enumerate(sites) for pod in started_pods(site, name)}
    for job in jobs:
        assert job.pod_run == pod_run
        if job.status is JobStatus.COMPLETED:
            assert job.claimed_by in {pod for _, pod in started}  # named after its pod
            assert job.attempts == 1
    # One pod per job, across the sites: every started pod runs a different job.
    owners = [job_of_pod(sites[i], pod) for i, pod in started]
    assert len(owners) == len(set(owners)), sorted(owners)
    ran = [r[0] for r in audit_rows(first.dsn, "ran")]
    assert len(ran) == len(set(ran)), sorted(ran)  # no job ran twice
    assert set(ran) <= set(owners)  # each ran in a pod of its own
    for site in sites:
        site.wait(lambda s=site: len(succeeded_alive(s, name)) <= history, timeout=60,
                  what="succeeded pods pruned to the history limit")
        last = site.wait(lambda s=site: status(s, "jobschedules", name).get("lastPod"),
                         timeout=30, what="status.lastPod")
        assert last.startswith(f"{name}-"), last
    runs = sum(site.metric("jobwarden_pod_runs_total", kind="JobSchedule", resource=row)
               for site in sites)
    assert runs >= slots, runs


def killed_mid_run(site: Site, job: str, after: JobStatus) -> None:
    """SIGKILL of the run-job process of a started run: nothing is recorded by the pod, so
    the operator applies the dead worker's rules -- idempotent: retried in a NEW pod
    (attempt 2, started twice); non-idempotent: ``interrupted``, started once, no new pod
    -- with ``pod killed`` in the job's error and a PodKilled Event."""
    site.api.create(exclusive(site, "killed", job, {"seconds": 8}))
    raw = site.wait(lambda: status(site, "exclusivejobs", "killed").get("jobId"),
                    timeout=60, what="the ExclusiveJob's job")
    job_id = int(raw)
    first = site.wait(lambda: next(iter(started_pods(site, "killed")), None), timeout=60,
                      what="the pod started")
    site.wait(lambda: audit_of(site, "start", job_id), timeout=60,
              what="the job began in the pod")
    site.kubelet.kill(first)  # SIGKILL: no outcome recorded
    final = site.wait(lambda: (j := site.client.job(job_id)) and j.status is after and j,
                      timeout=120, what=f"the job {after.value}")
    assert final.last_error is not None and "pod killed" in final.last_error, final.last_error
    starts = audit_of(site, "start", job_id)
    if after is JobStatus.COMPLETED:
        assert final.attempts == 2 and len(starts) == 2
        assert len(started_pods(site, "killed")) == 2  # a new pod for the retry
    else:
        assert len(starts) == 1  # never started twice
        assert started_pods(site, "killed") == {first}
    site.wait(lambda: "PodKilled" in events(site, "killed"), timeout=30,
              what="the PodKilled event")


def replace_stops_the_old_pod_first(site: Site, *, forced: bool = False) -> None:
    """Replace with a run that ignores cancel requests (it never heartbeats): only stopping
    its pod ends it, and the old run ends ``cancelled`` before the new run starts.

    Graceful (``forced=False``): the pod's deletion sends SIGTERM and run-job, past its
    stop grace (3 s, inside the pod's 10 s), records the stop itself and exits 13.
    Forced: run-job would wait 60 s but the pod's grace is 2 s, so the process is
    SIGKILLed, records nothing, and the operator ends the claim as ``pod replaced``."""
    pod = (template(run_env={"JOBWARDEN_STOP_GRACE": "60"}, terminationGracePeriodSeconds=2)
           if forced else template())
    site.api.create(schedule(site, "replaced", "tests.support.podrunjobs:Stubborn",
                             interval="8s", data={"seconds": 120}, pod=pod,
                             concurrencyPolicy="Replace"))
    row = f"{site.namespace}/replaced"

    def started() -> list[JobRecord]:
        # A run replaced while it still waited (pending) never started: left out.
        return sorted((j for j in jobs_of(site, row) if j.heartbeat_at is not None),
                      key=lambda j: j.id)

    jobs = site.wait(lambda: len(found := started()) >= 2
                     and found[0].status is JobStatus.CANCELLED and found, timeout=180,
                     what="the first run stopped and a later one started")
    old, new = jobs[0], jobs[1]
    assert old.finished_at is not None and new.heartbeat_at is not None
    assert old.finished_at <= new.heartbeat_at  # the new run started after the old ended
    assert "StoppingPod" in events(site, "replaced")
    old_pod = next(pod for pod in started_pods(site, "replaced")
                   if job_of_pod(site, pod) == old.id)
    ended = site.kubelet.process(old_pod).proc.poll()
    assert old.last_error is not None
    if forced:
        assert ended == -signal.SIGKILL, ended
        assert "pod replaced" in old.last_error, old.last_error
    else:
        assert ended == 13, ended  # run-job: stopped by SIGTERM past its stop grace
        assert "SIGTERM" in old.last_error, old.last_error
    assert not audit_of(site, "end", old.id)  # stopped early
    assert audit_of(site, "start", old.id)


def exclusive_defers_without_a_pod(site: Site) -> None:
    """An ExclusiveJob in a pod whose key's lease another owner holds: the run is
    deferred at the claim -- no pod created, no attempt spent -- and once the key is
    free it runs, once, in one pod, under a later fencing token."""
    holder = site.client.lease("key:busy-key", ttl=120, owner="someone-else").acquire()
    site.api.create(exclusive(site, "reindex", "tests.support.leasejobs:BusyOnce",
                              {"index": "products"}, concurrencyKey="busy-key",
                              lease={"onBusy": "defer"}))
    deferred = site.wait(lambda: (s := status(site, "exclusivejobs", "reindex"))
                         and s.get("phase") == "Deferred" and s, timeout=90, what="Deferred")
    job_id = int(deferred["jobId"])
    assert deferred["deferrals"] >= 1 and deferred["attempts"] == 0, deferred
    job = site.client.job(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.attempts == 0, job
    assert not run_pods(site, "reindex") and not started_pods(site, "reindex")
    holder.release()
    done = site.wait(lambda: (s := status(site, "exclusivejobs", "reindex"))
                     and s.get("phase") == "Succeeded" and s, timeout=90, what="Succeeded")
    assert done["attempts"] == 1 and int(done["jobId"]) == job_id, done
    assert done["lease"]["token"] > holder.token, (done["lease"], holder.token)
    assert started_pods(site, "reindex") == {f"reindex-j{job_id}-1"}
    assert len(audit_of(site, "ran", job_id)) == 1


@dataclasses.dataclass(frozen=True)
class Blocker:
    """What keeps a run's pod from starting: ``pod`` is the template that does it, ``cause``
    and ``event`` what the operator reports at the start deadline, ``lift`` what the test
    does afterwards so that a retry's pod can start."""

    name: str
    pod: dict[str, Any]
    cause: str
    event: str
    lift: Callable[[Site, str], None]


def _create_late_secret(site: Site, _: str) -> None:
    site.api.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "late", "namespace": site.namespace},
                     "stringData": {"token": "t"}})


#: The env of the job names a Secret that does not exist yet (CreateContainerConfigError):
#: the Secret is made.
MISSING_SECRET = Blocker(
    "missing-secret", template(env=[{"name": "LATE_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "late", "key": "token"}}}]),
    "start_deadline", "PodStartDeadlineExceeded", _create_late_secret)


def no_matching_node(node_joins: Callable[[Site, str], None]) -> Blocker:
    """The template selects ``pool: batch``, a label no node has (the scheduler reports the
    pod Unschedulable); ``node_joins`` brings a node with it (as an autoscaler would) and
    adds its kubelet to the site's."""
    return Blocker("no-matching-node", template(nodeSelector={"pool": "batch"}),
                   "unschedulable", "PodUnschedulable", node_joins)


def never_started_pod_is_retried(site: Site, blocker: Blocker) -> None:
    """A pod that cannot start (``blocker``) is reported at startDeadlineSeconds -- deleted,
    ``pod <cause>`` in the job's error, the cause's Event -- and, never having started,
    retried though the job is not idempotent (never ``interrupted``): once the blocker is
    lifted, the pod of a retry runs the job, once. Every attempt before it is in the
    history with the cause, having left the job pending."""
    # The deadline counts from the claim (docs/kubernetes.md), and the cause is read at its
    # end from what the kubelet or scheduler reported: 10 s was missed in a fresh-clone run
    # by the pod's create call alone (24 s after the claim), which made the first attempt
    # a start_deadline instead of the blocker's cause.
    manifest = exclusive(site, "stuck", "tests.support.testjobs:SleepyOnce",
                         {"seconds": 0.2}, pod=blocker.pod, startDeadlineSeconds=45)
    manifest["spec"]["job"]["maxRetries"] = 5  # a loaded node may miss a retry's deadline too
    site.api.create(manifest)
    raw = site.wait(lambda: status(site, "exclusivejobs", "stuck").get("jobId"),
                    timeout=60, what="the ExclusiveJob's job")
    job_id = int(raw)
    first = f"stuck-j{job_id}-1"
    reported = site.wait(
        lambda: (j := site.client.job(job_id)) and j.last_error
        and f"pod {blocker.cause}" in j.last_error and j, timeout=240,
        what=f"the pod reported as {blocker.cause}")
    # Retried at once (its backoff is the default 1-2 s), so it may be claimed again by now.
    assert reported.status in (JobStatus.PENDING, JobStatus.PROCESSING), reported
    assert first in reported.last_error, reported.last_error
    site.wait(lambda: blocker.event in events(site, "stuck"), timeout=30,
              what=f"the {blocker.event} event")
    # Deleted at the deadline, so it cannot start late (the blocker goes only now).
    site.wait(lambda: first not in {p["metadata"]["name"] for p in run_pods(site, "stuck")},
              timeout=60, what="the pod that never started deleted")
    blocker.lift(site, "stuck")
    done = site.wait(lambda: (j := site.client.job(job_id)) and j.status.terminal and j,
                     timeout=240, what="the retry finished")
    assert done.status is JobStatus.COMPLETED and done.attempts >= 2, done
    # Only the last attempt's pod ever ran a process, and the job ran once.
    assert started_pods(site, "stuck") == {f"stuck-j{job_id}-{done.attempts}"}
    assert len(audit_of(site, "start", job_id)) == 1
    earlier = [a for a in site.client.attempts(job_id) if a.attempt < done.attempts]
    assert earlier and all(f"pod {blocker.cause}" in (a.error or "")
                           and a.status_after == "pending" for a in earlier), earlier
