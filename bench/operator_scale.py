"""``python -m bench.operator_scale``: the operator with thousands of resources, on a real plane.

For each size, on a private real control plane (etcd, kube-apiserver,
kube-controller-manager from ``scripts/build-kube-tools``) and a fresh database,
``--schedules`` JobSchedules (a daily cron: nothing fires while it runs),
``--exclusive`` ExclusiveJobs and ``--pools`` WorkerPools are created across
``--namespaces`` namespaces *before* the operator starts. The operator runs
outside the cluster as ``python -m jobwarden operator`` (all namespaces, the
defaults a user gets, the admin kubeconfig), from the code under
``--pythonpath`` (default this checkout; give an export of another commit to
compare, e.g. ``git archive main operator | tar -x -C /tmp/before``). Measured:

* ``start``: from the process start to every resource reconciled -- a schedule
  row per JobSchedule, a job row per ExclusiveJob, a status on every
  WorkerPool (its pods are created; no kubelet runs them) -- and to the
  operator's readiness (kopf listed every kind); ``settled``: until its writes
  (kopf's annotation and status patches, Events) stopped for 6 s; the CPU
  seconds it used, per object;
* ``rest``: after ``--settle`` seconds, ``--rest`` seconds with nothing
  changing: the operator's CPU (utime+stime of the process, in cores), its RSS,
  and the API server's ``apiserver_request_total`` over the window by verb and
  resource (per minute); ``status_writes`` counts PATCH/PUT of a status
  subresource (there should be none at rest);
* ``burst``: ``--burst`` more JobSchedules created at ``--rate`` per second
  through the API: create sent -> schedule row (its ``created_at``, the
  database's clock on the same host) p50/p99;
* ``restart`` (``--restart``, at the largest size): SIGTERM, a new process,
  the time to readiness and to a resume pass of every object (the operator's
  ``jobwarden_operator_reconciles_total``), and the API requests the restart
  cost (GETs of single objects, 429s).

``--profile`` runs py-spy (when installed) on the operator for the start's
first ``--start-profile`` seconds, the rest window and the restart and writes
its collapsed stacks next to ``--json``. The load average before and after is
part of the record: on the shared 2-core machine
every figure moves with it, so compare runs of one invocation only. Nothing is
asserted (tests/controller and tests/cluster specify the behaviour). Exit 3 (one
line) where the kube tools or openssl are missing.
"""

from __future__ import annotations

import argparse
import base64
import collections
import concurrent.futures
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import yaml

from tests.cluster import tools
from tests.cluster.api import ApiError, RealKubeAPI
from tests.cluster.conftest import started_plane
from tests.cluster.controlplane import ControlPlane
from tests.support.ports import free_port
from tests.support.postgres import DatabaseFactory, server_dsn

REPO = Path(__file__).resolve().parents[1]
GROUP, VERSION = "jobwarden.io", "v1alpha1"
#: Nothing fires during a run (a bench never lasts from 18:00 to 03:00 UTC).
CRON = "0 3 * * *"
#: The kinds whose request counts are the operator's (the controller manager's are not).
OPERATOR_RESOURCES = frozenset({"jobschedules", "exclusivejobs", "workerpools", "pods",
                                "secrets", "events", "deployments"})


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- the objects --------------------------------------------------------------------------


def schedule(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": CRON, "job": {"class": "bench.jobs:Nightly",
                                              "data": {"n": name}}}}


def exclusive(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ExclusiveJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"job": {"class": "bench.jobs:Once", "data": {"n": name}},
                     "concurrencyKey": f"bench-{namespace}-{name}"}}


def pool(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkerPool",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "example/jobs:1", "replicas": 1, "queues": ["default"],
                     "apps": ["bench.jobs"], "dsnSecretRef": {"name": "db"}}}


def create_all(api: RealKubeAPI, objects: Sequence[tuple[dict[str, Any], str]], *,
               threads: int = 6) -> float:
    """Create ``objects`` (body, namespace) through the API; the seconds it took."""
    started = time.monotonic()

    def one(item: tuple[dict[str, Any], str]) -> None:
        body, namespace = item
        for attempt in range(20):
            try:
                api.create(body, namespace)
                return
            except ApiError as exc:
                if exc.code == 409:
                    return
                if (exc.code != 429 and exc.code < 500) or attempt == 19:
                    raise
                time.sleep(0.2)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool_:
        list(pool_.map(one, objects))
    return time.monotonic() - started


def install_crds(api: RealKubeAPI) -> None:
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        with contextlib.suppress(ApiError):
            api.create(crd, None)

    def established() -> bool:
        for path in sorted((REPO / "crds").glob("*.yaml")):
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            found = api.get("customresourcedefinitions", name, None)
            conditions = {c["type"]: c["status"]
                          for c in (found or {}).get("status", {}).get("conditions", [])}
            if conditions.get("Established") != "True":
                return False
        return True

    wait(established, 60, "the CRDs are established")
    api._resources.clear()  # rediscover: the new kinds are served now


def wait(probe: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> float:
    started = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if probe():
                return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s: {what}")
        time.sleep(every)


# -- the operator process -----------------------------------------------------------------


class OperatorProcess:
    #: More environment for the operator (``--operator-env``).
    extra_env: dict[str, str] = {}

    def __init__(self, *, plane: ControlPlane, dsn: str, pythonpath: Path, workdir: Path,
                 tag: str) -> None:
        self.port = free_port()
        self.log = workdir / f"operator-{tag}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
        env.update({"KUBECONFIG": str(plane.kubeconfig), "JOBWARDEN_DSN": dsn,
                    "PYTHONPATH": str(pythonpath), "JOBWARDEN_POD_NAME": f"bench-{tag}",
                    "JOBWARDEN_CLUSTER": "bench", "JOBWARDEN_LOG_LEVEL": "INFO",
                    **self.extra_env})
        self.started = time.monotonic()
        with open(self.log, "ab") as handle:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobwarden", "operator", "--http-port", str(self.port)],
                env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)

    def scrape(self, path: str = "/metrics") -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return str(r.read().decode())

    def ready(self) -> bool:
        try:
            return json.loads(self.scrape("/readyz")).get("ok") is True
        except Exception:
            return False

    def reconciles(self) -> float:
        total = 0.0
        for line in self.scrape().splitlines():
            if line.startswith("jobwarden_operator_reconciles_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> float:
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return time.monotonic() - started


@contextlib.contextmanager
def spying(pid: int, out: Path | None, seconds: float) -> Iterator[None]:
    """py-spy on ``pid`` for ``seconds`` (collapsed stacks in ``out``), when installed."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if out is None or not Path(binary).exists():
        yield
        return
    proc = subprocess.Popen([binary, "record", "--pid", str(pid), "--duration",
                             str(int(seconds)), "--rate", "50", "--format", "raw",
                             "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        try:
            proc.wait(seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()


def hot_frames(path: Path, top: int = 15) -> list[tuple[str, float]]:
    """From py-spy's collapsed stacks: the frames (function and file) in the most samples,
    each with its share of all samples (inclusive: a frame counts once per stack)."""
    if not path.exists():
        return []
    shares: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        frames = {f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                  + ")" for f in stack.split(";") if "(" in f}
        for frame in frames:
            shares[frame] += int(count)
    return [(frame, round(n / total, 3)) for frame, n in shares.most_common(top)] \
        if total else []


# -- API server request counts ------------------------------------------------------------


def requests(api: RealKubeAPI) -> collections.Counter[tuple[str, str, str, str]]:
    """apiserver_request_total by (verb, resource, subresource, code)."""
    text = api.request("GET", "/metrics")
    found: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
    for line in str(text).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_raw, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in labels_raw.split('",') if "=" in part)
        labels = {k: v.strip('"') for k, v in labels.items()}
        key = (labels.get("verb", ""), labels.get("resource", ""),
               labels.get("subresource", ""), labels.get("code", ""))
        found[key] += int(float(value))
    return found


def delta(after: collections.Counter[Any], before: collections.Counter[Any]
          ) -> dict[tuple[str, str, str, str], int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}


def summarize_requests(changes: dict[tuple[str, str, str, str], int], seconds: float
                       ) -> dict[str, Any]:
    ours = {k: v for k, v in changes.items() if k[1] in OPERATOR_RESOURCES}
    per_minute = 60.0 / seconds
    by_kind: collections.Counter[str] = collections.Counter()
    for (verb, resource, sub, code), count in ours.items():
        by_kind[f"{verb} {resource}{'/' + sub if sub else ''} {code}"] += count
    return {
        "operator_per_minute": round(sum(ours.values()) * per_minute, 1),
        "all_per_minute": round(sum(changes.values()) * per_minute, 1),
        "status_writes": sum(v for k, v in ours.items()
                             if k[2] == "status" and k[0] in ("PATCH", "UPDATE", "APPLY")),
        "single_gets": sum(v for k, v in ours.items() if k[0] == "GET"),
        "throttled_429": sum(v for k, v in changes.items() if k[3] == "429"),
        "by_call": dict(sorted(by_kind.items())),
    }


# -- the database -------------------------------------------------------------------------


def counts(dsn: str) -> tuple[int, int]:
    """(schedule rows, ExclusiveJob job rows)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM jobwarden.schedules),"
                           " (SELECT count(*) FROM jobwarden.jobs"
                           "  WHERE schedule_name IS NULL)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def created_at(dsn: str, names: Sequence[str]) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT name, extract(epoch FROM created_at)::float8"
                            " FROM jobwarden.schedules WHERE name = ANY(%s)",
                            [list(names)]).fetchall()
    return {str(name): float(at) for name, at in rows}


# -- one size -----------------------------------------------------------------------------


def measure(*, factory: DatabaseFactory, size: int, args: argparse.Namespace,
            pythonpath: Path, tag: str, workdir: Path, restart: bool) -> dict[str, Any]:
    record: dict[str, Any] = {"schedules": size, "exclusive": args.exclusive,
                              "pools": args.pools, "namespaces": args.namespaces,
                              "code": tag, "loadavg_before": os.getloadavg()}
    dsn = factory.create()
    operator: OperatorProcess | None = None
    try:
        with started_plane(tools.kube_tools(), workdir / f"plane-{tag}-{size}") as plane:
            api = plane.admin_api()
            install_crds(api)
            namespaces = [f"bench-{i:02d}" for i in range(args.namespaces)]
            for namespace in namespaces:
                plane.ensure_namespace(namespace)
                api.create({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "db", "namespace": namespace},
                            "data": {"dsn": base64.b64encode(dsn.encode()).decode()}},
                           namespace)
            objects = [(schedule(f"s-{i}", namespaces[i % len(namespaces)]),
                        namespaces[i % len(namespaces)]) for i in range(size)]
            objects += [(exclusive(f"x-{i}", namespaces[i % len(namespaces)]),
                         namespaces[i % len(namespaces)]) for i in range(args.exclusive)]
            objects += [(pool(f"p-{i}", namespaces[i % len(namespaces)]),
                         namespaces[i % len(namespaces)]) for i in range(args.pools)]
            record["create_seconds"] = round(create_all(api, objects), 1)
            before = requests(api)
            operator = OperatorProcess(plane=plane, dsn=dsn, pythonpath=pythonpath,
                                       workdir=workdir, tag=f"{tag}-{size}")
            start_profile = args.profile_dir / f"start-{tag}-{size}.txt" \
                if args.profile_dir else None
            with spying(operator.proc.pid, start_profile, args.start_profile):
                record["start"] = start_times(api, operator, dsn, size=size,
                                              exclusive=args.exclusive, pools=args.pools,
                                              timeout=args.timeout)
            if start_profile is not None:
                record["start"]["profile"] = hot_frames(start_profile)
            record["start"]["requests"] = summarize_requests(
                delta(requests(api), before), max(1.0, record["start"]["settled"]))
            time.sleep(args.settle)
            record["rest"] = rest(api, operator, seconds=args.rest,
                                  profile=args.profile_dir / f"rest-{tag}-{size}.txt"
                                  if args.profile_dir else None)
            if args.burst:
                record["burst"] = burst(api, dsn, namespaces, count=args.burst,
                                        rate=args.rate)
            if restart:
                record["restart"] = restart_times(
                    api, operator, plane=plane, dsn=dsn, pythonpath=pythonpath,
                    workdir=workdir, tag=f"{tag}-{size}-restart",
                    objects=size + args.exclusive + args.pools + (args.burst or 0),
                    timeout=args.timeout, profile=args.profile_dir / f"restart-{tag}-{size}.txt"
                    if args.profile_dir else None)
                operator = record["restart"].pop("process")
            if operator is not None:
                record["stop_seconds"] = round(operator.stop(), 1)
    finally:
        if operator is not None:
            operator.stop()
        factory.drop(dsn)
    record["loadavg_after"] = os.getloadavg()
    return record


def start_times(api: RealKubeAPI, operator: OperatorProcess, dsn: str, *, size: int,
                exclusive: int, pools: int, timeout: float) -> dict[str, Any]:
    marks: dict[str, float] = {}
    progress: list[tuple[float, int, int]] = []

    def done() -> bool:
        now = time.monotonic() - operator.started
        if "ready" not in marks and operator.ready():
            marks["ready"] = now
        schedules, jobs = counts(dsn)
        progress.append((round(now, 1), schedules, jobs))
        if schedules >= size and "schedules" not in marks:
            marks["schedules"] = now
        if jobs >= exclusive and "exclusive" not in marks:
            marks["exclusive"] = now
        if "pools" not in marks:
            found = api.request("GET", f"/apis/{GROUP}/{VERSION}/workerpools")
            if sum(1 for p in found.get("items") or [] if p.get("status")) >= pools:
                marks["pools"] = now
        return {"ready", "schedules", "exclusive", "pools"} <= set(marks)

    if operator.proc.poll() is not None:
        raise RuntimeError(f"the operator exited: see {operator.log}")
    wait(done, timeout, "every resource reconciled", every=0.5)
    every_10s = [p for i, p in enumerate(progress) if i % 20 == 0]
    rows_cpu = operator.cpu_seconds()
    # Rows exist once each handler ran; kopf still patches each object (annotations,
    # status) and posts its Events after. Settled: no write to the operator's kinds,
    # pods or Events for 6 s.
    writes: list[int] = []

    def quiet() -> bool:
        counted = requests(api)
        writes.append(sum(v for k, v in counted.items() if k[0] in ("PATCH", "POST", "PUT")
                          and k[1] in OPERATOR_RESOURCES))
        return len(writes) >= 4 and writes[-1] == writes[-4]

    wait(quiet, timeout, "the operator's writes settled", every=2.0)
    marks["settled"] = time.monotonic() - operator.started - 6.0
    cpu = operator.cpu_seconds()
    return {"cpu_seconds": round(cpu, 1), "cpu_seconds_to_rows": round(rows_cpu, 1),
            "settled": round(marks["settled"], 1),
            "cpu_ms_per_object": round(1000 * cpu / (size + exclusive + pools), 2),
            "rss_mib": round(operator.rss_mib(), 1),
            "ready": round(marks["ready"], 1), "schedules": round(marks["schedules"], 1),
            "exclusive": round(marks["exclusive"], 1), "pools": round(marks["pools"], 1),
            "all_reconciled": round(max(v for k, v in marks.items() if k != "settled"), 1),
            "progress_every_10s": every_10s}


def rest(api: RealKubeAPI, operator: OperatorProcess, *, seconds: float,
         profile: Path | None) -> dict[str, Any]:
    before = requests(api)
    cpu, started = operator.cpu_seconds(), time.monotonic()
    with spying(operator.proc.pid, profile, seconds):
        time.sleep(seconds)
    elapsed = time.monotonic() - started
    used = operator.cpu_seconds() - cpu
    return {"seconds": round(elapsed, 1), "cpu_cores": round(used / elapsed, 4),
            "rss_mib": round(operator.rss_mib(), 1),
            "requests": summarize_requests(delta(requests(api), before), elapsed),
            "profile": hot_frames(profile) if profile else []}


def burst(api: RealKubeAPI, dsn: str, namespaces: Sequence[str], *, count: int,
          rate: float) -> dict[str, Any]:
    sent: dict[str, float] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        namespace = namespaces[i % len(namespaces)]
        body = schedule(f"burst-{i}", namespace)
        at = time.time()
        api.create(body, namespace)
        with lock:
            sent[f"{namespace}/burst-{i}"] = at

    started = time.monotonic()
    # Enough threads for 100 creates/s when one takes ~0.3 s on a loaded machine.
    with concurrent.futures.ThreadPoolExecutor(32) as pool_:
        futures = []
        for i in range(count):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool_.submit(one, i))
        for future in futures:
            future.result()
    sending = time.monotonic() - started
    found: dict[str, float] = {}

    def all_rows() -> bool:
        found.update(created_at(dsn, [n for n in sent if n not in found]))
        return len(found) >= len(sent)

    wait(all_rows, 300, "every burst schedule has its row", every=0.5)
    latencies = [found[name] - sent[name] for name in sent]
    return {"count": count, "rate": rate, "sent_seconds": round(sending, 2),
            "achieved_rate": round(count / sending, 1),
            "p50": round(quantile(latencies, 0.5), 3), "p99": round(quantile(latencies, 0.99), 3),
            "max": round(max(latencies), 3)}


def restart_times(api: RealKubeAPI, operator: OperatorProcess, *, plane: ControlPlane, dsn: str,
                  pythonpath: Path, workdir: Path, tag: str, objects: int, timeout: float,
                  profile: Path | None) -> dict[str, Any]:
    stopped = operator.stop()
    before = requests(api)
    fresh = OperatorProcess(plane=plane, dsn=dsn, pythonpath=pythonpath, workdir=workdir,
                            tag=tag)
    marks: dict[str, float] = {}

    def done() -> bool:
        now = time.monotonic() - fresh.started
        if "ready" not in marks and fresh.ready():
            marks["ready"] = now
        if fresh.reconciles() >= objects:
            marks["resumed"] = now
        return {"ready", "resumed"} <= set(marks)

    # Every 2 s: rendering /metrics with thousands of series is not free (a Prometheus
    # scrapes every 15-60 s; polling it faster would be the bench's own load).
    with spying(fresh.proc.pid, profile, 30):
        wait(done, timeout, "every object resumed", every=2.0)
    elapsed = time.monotonic() - fresh.started
    cpu = fresh.cpu_seconds()
    return {"stop_seconds": round(stopped, 1), "ready": round(marks["ready"], 1),
            "resumed": round(marks["resumed"], 1), "cpu_seconds": round(cpu, 1),
            "cpu_ms_per_object": round(1000 * cpu / objects, 2),
            "profile": hot_frames(profile) if profile else [],
            "requests": summarize_requests(delta(requests(api), before), elapsed),
            "process": fresh}


# -- the command --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_scale",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000",
                        help="JobSchedule counts, comma-separated (default 100,1000)")
    parser.add_argument("--exclusive", type=int, default=1000, help="ExclusiveJobs")
    parser.add_argument("--pools", type=int, default=20, help="WorkerPools")
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds after every resource is reconciled before the rest window")
    parser.add_argument("--rest", type=float, default=60.0, help="rest window (seconds)")
    parser.add_argument("--burst", type=int, default=200,
                        help="JobSchedules created in the burst (0: none)")
    parser.add_argument("--rate", type=float, default=100.0, help="burst creates per second")
    parser.add_argument("--restart", action="store_true",
                        help="restart the operator at the largest size")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds to wait for every resource reconciled")
    parser.add_argument("--pythonpath", action="append", type=Path, default=[],
                        help="the operator's code (a directory holding the jobwarden "
                             "package); repeat to compare (run alternately per size)")
    parser.add_argument("--dsn", default=None,
                        help="an admin DSN (default: the tests' server, else an embedded one)")
    parser.add_argument("--operator-env", action="append", default=[], metavar="NAME=VALUE",
                        help="more environment for the operator (repeat)")
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the start, the rest window and the restart "
                             "(next to --json)")
    parser.add_argument("--start-profile", type=float, default=60.0,
                        help="seconds of the start profiled (--profile)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or args.namespaces < 1:
        parser.error("--sizes and --namespaces must be positive")
    why = tools.plane_unavailable()
    if why is not None:
        print(f"bench.operator_scale: {why}", file=sys.stderr)
        return 3
    codes = args.pythonpath or [REPO / "operator"]
    OperatorProcess.extra_env = dict(item.split("=", 1) for item in args.operator_env)
    args.profile_dir = (args.json or Path("operator-scale.json")).parent if args.profile \
        else None
    admin, embedded = (args.dsn, None) if args.dsn else server_dsn()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    factory = DatabaseFactory(admin, tag="opscale")
    try:
        with tempfile.TemporaryDirectory(prefix="jw-opscale-") as tmp:
            for size in sizes:
                for index, code in enumerate(codes):
                    tag = f"code{index}"
                    run = measure(factory=factory, size=size, args=args, pythonpath=code,
                                  tag=tag, workdir=Path(tmp),
                                  restart=args.restart and size == max(sizes))
                    run["pythonpath"] = str(code)
                    runs.append(run)
                    print(line(run), flush=True)
    finally:
        factory.close()
        if embedded is not None:
            embedded.close()
    record = {"bench": "operator_scale",
              "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count()},
              "wall_seconds": round(time.monotonic() - started, 1), "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def line(run: dict[str, Any]) -> str:
    rest_ = run["rest"]
    text = (f"{run['code']} {run['schedules']} schedules + {run['exclusive']} exclusive + "
            f"{run['pools']} pools (load {run['loadavg_before'][0]:.1f}): start -> ready "
            f"{run['start']['ready']} s, all reconciled {run['start']['all_reconciled']} s, "
            f"settled {run['start']['settled']} s "
            f"({run['start']['cpu_ms_per_object']} CPU ms/object); "
            f"rest {rest_['cpu_cores']} cores, {rest_['rss_mib']} MiB, "
            f"{rest_['requests']['operator_per_minute']} requests/min, "
            f"{rest_['requests']['status_writes']} status writes")
    if "burst" in run:
        text += f"; burst p50 {run['burst']['p50']} s p99 {run['burst']['p99']} s"
    if "restart" in run:
        text += (f"; restart -> ready {run['restart']['ready']} s, resumed "
                 f"{run['restart']['resumed']} s")
    return text


if __name__ == "__main__":
    raise SystemExit(main())
