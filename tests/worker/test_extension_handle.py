"""Extensions are built from the worker's narrow handle, never from the worker.

The handle (jobwarden/worker/handle.py) is what an extension may know of the
worker: its database, settings, host and recorder, and a few operations bound
late to the worker's parts -- which exist only once every extension is built.
"""

from __future__ import annotations

from typing import Any

from jobwarden.db.database import Database
from jobwarden.settings import WorkerSettings
from jobwarden.worker.extensions import Extension
from jobwarden.worker.handle import WorkerHandle
from jobwarden.worker.worker import Worker
from tests.conftest import FAST


class Probe(Extension):
    """Records what its factory was given, and what the handle said from a hook."""

    def __init__(self, handle: WorkerHandle) -> None:
        self.handle = handle
        self.gates: list[tuple[bool, int]] = []

    def claim_gate(self, free: int) -> int:
        self.gates.append((self.handle.stopping(), self.handle.in_flight()))
        return free


def test_a_factory_gets_the_handle_with_what_the_worker_is_configured_with(
        db: Database) -> None:
    given: list[Any] = []
    settings = WorkerSettings(**{**FAST, "host": "handle-host"})
    worker = Worker(db, settings, extensions=[lambda handle: given.append(handle) or Probe(handle)])

    (handle,) = given
    assert isinstance(handle, WorkerHandle) and not isinstance(handle, Worker)
    assert handle is worker.handle
    assert (handle.db, handle.settings, handle.host) == (db, settings, "handle-host")
    assert handle.recorder is worker.recorder
    # The worker's parts are not the extension's business.
    assert not any(hasattr(handle, part) for part in ("claimer", "slots", "heartbeater",
                                                      "runner", "capacity"))


def test_the_handles_operations_reach_the_parts_built_after_the_extensions(
        db: Database) -> None:
    worker = Worker(db, WorkerSettings(**{**FAST, "host": "late"}), extensions=[Probe])
    probe = worker.extension(Probe)
    assert probe is not None
    handle = probe.handle

    assert probe.claim_gate(3) == 3  # a hook: the worker is built by now
    worker.capacity.take(2)
    worker.claimer.wake_event.clear()
    handle.wake()
    assert worker.claimer.wake_event.is_set()
    worker.request_stop()
    assert probe.claim_gate(3) == 3
    assert probe.gates == [(False, 0), (True, 2)]
    worker.capacity.give(2)
    worker.stop(timeout=0)
