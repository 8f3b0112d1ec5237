"""Jobs for the pod-run tests (tests/e2e/test_pod_runs.py, tests/cluster)."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import jobwarden
from tests.support.testjobs import audit


class Stubborn(jobwarden.Job):
    """Runs ``seconds`` without ever calling heartbeat(): a cancel request cannot reach it,
    only stopping its process does (Replace has to stop the pod)."""

    timeout = 300

    def perform(self, data: Any) -> str:
        audit(self, "start")
        _keep_running(float(data.get("seconds", 60)))
        audit(self, "end")
        return "done"


class Hog(jobwarden.Job):
    """Holds ``mb`` MiB of memory for ``seconds``: above its pod's memory limit it is
    OOM-killed (the process kubelet samples the RSS, as a node's cgroup would enforce it)."""

    timeout = 300

    def perform(self, data: Any) -> str:
        audit(self, "start")
        held = bytearray(int(data.get("mb", 256)) * 1024 * 1024)
        for index in range(0, len(held), 4096):  # touch every page: resident, not virtual
            held[index] = 1
        _keep_running(float(data.get("seconds", 60)))
        audit(self, "end")
        return "held"


class Filler(jobwarden.Job):
    """On its first attempt writes ``mb`` MiB into its temporary directory (the pod's /tmp
    emptyDir) and waits ``seconds``: above the pod's ephemeral-storage limit the kubelet
    evicts it. A later attempt just completes (a retry after the eviction)."""

    timeout = 300

    def perform(self, data: Any) -> str:
        audit(self, "start")
        if self.attempt == 1:
            path = os.path.join(tempfile.gettempdir(), "fill")
            with open(path, "wb") as handle:
                for _ in range(int(data.get("mb", 8))):
                    handle.write(os.urandom(1024 * 1024))
                handle.flush()
                os.fsync(handle.fileno())
            _keep_running(float(data.get("seconds", 60)))
        audit(self, "end")
        return "filled"


class FillerOnce(Filler):
    """A non-idempotent Filler: evicted mid-run it must end interrupted, never run again."""

    idempotent = False


class FirstSlow(jobwarden.Job):
    """Its first attempt takes ``seconds`` (long enough to lose its node under it); a
    retry completes at once."""

    timeout = 300

    def perform(self, data: Any) -> str:
        audit(self, "start")
        if self.attempt == 1:
            _keep_running(float(data.get("seconds", 120)))
        audit(self, "end")
        return "done"


class FirstSlowOnce(FirstSlow):
    """A non-idempotent FirstSlow: its node lost mid-run it ends interrupted."""

    idempotent = False


def _keep_running(seconds: float) -> None:
    """The job's work: a process that stays busy for ``seconds`` (short sleeps, so a
    signal or a kill finds it mid-run), long enough for its pod to be lost under it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
