"""The process kubelet reports what a node reports, on the real API server.

Pods are created directly (no chart): each provokes one thing a node does --
an exit, an OOM kill, an image that cannot be pulled, a Secret that is missing,
a command that does not exist, a deadline -- and the pod's status must read as
a kubelet writes it, since the operator (pod-per-run, #18) acts on exactly
these fields. Also: the container runs as its ``runAsUser``/``runAsGroup``/
``fsGroup``, sees the ``KUBERNETES_SERVICE_*`` variables, and its ``exec`` and
``tcpSocket`` probes decide readiness.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import RealCluster, secret
from tests.support.ports import free_port

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

PY = sys.executable


def pod(name: str, namespace: str, command: list[str], *, restart: str = "Never",
        **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = container.pop("pod_spec", {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": restart, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 5, **spec,
                     "containers": [{"name": "main", "image": "example/jobs:1",
                                     "command": command, **container}]}}


def container_status(cluster: RealCluster, name: str) -> dict[str, Any]:
    found = cluster.api.get("pods", name, cluster.namespace) or {}
    statuses = (found.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def phase(cluster: RealCluster, name: str) -> str | None:
    found = cluster.api.get("pods", name, cluster.namespace) or {}
    return (found.get("status") or {}).get("phase")


def wait_default_account(cluster: RealCluster) -> None:
    # The ServiceAccount admission plugin refuses pods until the controller made it.
    cluster.wait(lambda: cluster.api.get("serviceaccounts", "default", cluster.namespace),
                 timeout=60, what="the default ServiceAccount")


def test_container_terminations_are_reported_as_a_kubelet_does(realkube: RealCluster):
    ns = realkube.namespace
    wait_default_account(realkube)
    realkube.api.create(pod("done", ns, [PY, "-c", "print('ok')"]))
    realkube.api.create(pod("fails", ns, [PY, "-c", "raise SystemExit(3)"]))
    realkube.api.create(pod("hog", ns, [PY, "-c", (
        "import time\nblock = bytearray(400 * 2**20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\ntime.sleep(120)")],
        resources={"limits": {"memory": "64Mi"}}))
    realkube.api.create(pod("nocommand", ns, ["no-such-command-here"]))
    realkube.api.create(pod("crashing", ns, [PY, "-c", (
        "import sys\nprint('starting', flush=True)\n"
        "sys.stderr.write('cannot import app module x\\n')\nraise SystemExit(2)")],
        restart="Always", terminationMessagePolicy="FallbackToLogsOnError"))
    realkube.api.create(pod("overdue", ns, [PY, "-c", "import time; time.sleep(300)"],
                            pod_spec={"activeDeadlineSeconds": 2}))

    def terminated(name: str) -> dict[str, Any] | None:
        state = container_status(realkube, name).get("state") or {}
        return state.get("terminated") if phase(realkube, name) in ("Succeeded", "Failed") \
            else None

    done = realkube.wait(lambda: terminated("done"), timeout=60, what="pod done to end")
    assert phase(realkube, "done") == "Succeeded"
    assert done["exitCode"] == 0 and done["reason"] == "Completed"
    assert done["startedAt"] and done["finishedAt"] and done["containerID"]

    fails = realkube.wait(lambda: terminated("fails"), timeout=60, what="pod fails to end")
    assert phase(realkube, "fails") == "Failed"
    assert (fails["exitCode"], fails["reason"]) == (3, "Error")
    assert "message" not in fails  # terminationMessagePolicy File, and no file written

    hog = realkube.wait(lambda: terminated("hog"), timeout=60, what="pod hog to be OOM-killed")
    assert phase(realkube, "hog") == "Failed"
    assert (hog["exitCode"], hog["reason"]) == (137, "OOMKilled")

    start = realkube.wait(lambda: terminated("nocommand"), timeout=60,
                          what="pod nocommand to fail")
    assert phase(realkube, "nocommand") == "Failed"
    assert (start["exitCode"], start["reason"]) == (128, "StartError")
    assert "executable file not found" in start["message"]

    def backing_off() -> dict[str, Any] | None:
        status = container_status(realkube, "crashing")
        waiting = (status.get("state") or {}).get("waiting") or {}
        return status if status.get("restartCount", 0) >= 2 \
            and waiting.get("reason") == "CrashLoopBackOff" else None

    crashing = realkube.wait(backing_off, timeout=60,
                             what="pod crashing to restart and back off")
    assert phase(realkube, "crashing") == "Running"
    last = crashing["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (2, "Error")
    # FallbackToLogsOnError: the tail of this run's output (not the earlier runs').
    assert last["message"] == "starting\ncannot import app module x"

    overdue = realkube.wait(lambda: terminated("overdue"), timeout=60,
                            what="pod overdue to pass its deadline")
    status = (realkube.api.get("pods", "overdue", ns) or {})["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")
    assert overdue["exitCode"] == 143  # SIGTERM within the grace period


def test_pods_that_cannot_start_wait_with_the_kubelets_reason(realkube: RealCluster):
    ns = realkube.namespace
    wait_default_account(realkube)
    sleep = [PY, "-c", "import time; time.sleep(300)"]
    realkube.api.create(pod("unpullable", ns, sleep, image="registry.invalid/jobs:1"))
    realkube.api.create(pod("noconfig", ns, sleep, env=[
        {"name": "DSN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "dsn"}}}]))
    realkube.api.create(pod("rootish", ns, sleep, securityContext={"runAsUser": 0},
                            pod_spec={"securityContext": {"runAsNonRoot": True}}))

    def waiting(name: str, reason: str) -> dict[str, Any] | None:
        state = (container_status(realkube, name).get("state") or {}).get("waiting") or {}
        return state if state.get("reason") == reason else None

    pull = realkube.wait(lambda: waiting("unpullable", "ErrImagePull"), timeout=30,
                         what="ErrImagePull")
    assert "no such host" in pull["message"]
    realkube.wait(lambda: waiting("unpullable", "ImagePullBackOff"), timeout=30,
                  what="ImagePullBackOff")
    assert phase(realkube, "unpullable") == "Pending"
    events = realkube.api.events(ns, involved="unpullable")
    assert any(e["reason"] == "Failed" and e["source"]["component"] == "kubelet"
               for e in events), events

    config = realkube.wait(lambda: waiting("noconfig", "CreateContainerConfigError"),
                           timeout=30, what="CreateContainerConfigError")
    assert config["message"] == 'secret "later" not found'
    rootish = realkube.wait(lambda: waiting("rootish", "CreateContainerConfigError"),
                            timeout=30, what="runAsNonRoot refused")
    assert "runAsNonRoot" in rootish["message"]
    # The Secret appears: the kubelet retries (backing off) and the container starts.
    realkube.api.create(secret("later", ns, "postgresql://later"))
    realkube.wait(lambda: phase(realkube, "noconfig") == "Running"
                  and "running" in container_status(realkube, "noconfig")["state"],
                  timeout=60, what="the pod to start once its Secret exists")
    assert phase(realkube, "unpullable") == "Pending"


def test_identity_service_env_and_exec_and_tcp_probes(realkube: RealCluster):
    ns = realkube.namespace
    wait_default_account(realkube)
    report = ("import json, os; print(json.dumps({'ids': [os.getuid(), os.getgid(), "
              "sorted(os.getgroups())], 'host': os.environ.get('KUBERNETES_SERVICE_HOST'), "
              "'port': os.environ.get('KUBERNETES_SERVICE_PORT'), "
              "'home': open(os.path.join(os.environ['HOME'], 'x'), 'w').write('1')}))")
    realkube.api.create(pod("who", ns, [PY, "-c", report], pod_spec={"securityContext": {
        "runAsUser": 10001, "runAsGroup": 10002, "fsGroup": 10003}}))
    port = free_port()
    flag = "/scratch/ready"
    realkube.api.create(pod(
        "probed", ns,
        [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        ports=[{"name": "web", "containerPort": port}],
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        env=[{"name": "FLAG", "value": flag}],
        readinessProbe={"exec": {"command": ["sh", "-c", 'test -f "$FLAG"']},
                        "periodSeconds": 1},
        livenessProbe={"tcpSocket": {"port": "web"}, "periodSeconds": 1},
        pod_spec={"volumes": [{"name": "scratch", "emptyDir": {}}],
                  "securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}))

    realkube.wait(lambda: phase(realkube, "who") == "Succeeded", timeout=60,
                  what="pod who to finish")
    line = realkube.kubelet.process("who").logs().strip().splitlines()[-1]
    seen = json.loads(line)
    assert seen["ids"][:2] == [10001, 10002] and 10003 in seen["ids"][2], seen
    server = realkube.plane.server.split("//")[1]
    assert f"{seen['host']}:{seen['port']}" == server
    assert seen["home"] == 1  # HOME is the user's own

    realkube.wait(lambda: phase(realkube, "probed") == "Running", timeout=60,
                  what="pod probed to run")
    # Live (tcpSocket answers) but not ready until the exec probe's file exists.
    assert container_status(realkube, "probed")["ready"] is False
    process = realkube.kubelet.process("probed")
    ready_file = process.env["FLAG"]
    # The emptyDir belongs to the container's user: it can write there.
    assert os.stat(ready_file.rsplit("/", 1)[0]).st_mode & 0o777 == 0o777
    Path(ready_file).touch()
    realkube.wait(lambda: container_status(realkube, "probed").get("ready") is True,
                  timeout=30, what="the exec readiness probe to pass")
    assert container_status(realkube, "probed")["restartCount"] == 0
