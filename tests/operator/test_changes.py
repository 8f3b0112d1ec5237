"""The change queue of a queued kind (JobSchedule): batches, bounded writes, retries.

The resync loop's pass with fakes for the API (every call recorded) and the
reconciler; the queue's writers run for real.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import kopf

from jobwarden.controller import changes, handlers, resyncing
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.kube.kinds import Kind
from tests.support.waiting import wait_for


class Objects:
    """The custom resource API of one kind; ``hold`` keeps status writes waiting."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.patched: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.hold = threading.Event()
        self.hold.set()
        self._lock = threading.Lock()

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.hold.wait()
            with self._lock:
                self.patched.append(name)
            # The object as the server answers: the status merged, the next version.
            body = self.kind.cache.get(f"uid-{name}") or {}
            meta = body.get("metadata") or {}
            return {**body, "status": {**(body.get("status") or {}), **status},
                    "metadata": {**meta,
                                 "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}
        finally:
            with self._lock:
                self.in_flight -= 1


class Reconciler:
    """Writes ``status.seen`` = the generation; ``fail`` passes of a name raise first."""

    def __init__(self) -> None:
        self.passes: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}
        self.digest_reads: list[int] = []
        self.settle_seconds = 0.0

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        name = str(body["metadata"]["name"])
        self.passes.append((name, trigger))
        if self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise kopf.TemporaryError("database unavailable", delay=5)
        generation = body["metadata"].get("generation")
        if (body.get("status") or {}).get("seen") != generation:
            patch.status["seen"] = generation
        return "ok"

    def fingerprints(self, bodies: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Hashable | None]:
        self.digest_reads.append(len(bodies))
        return {str(b["metadata"]["uid"]): "digest" for b in bodies}


def obj(name: str, generation: int = 1, version: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": generation, "resourceVersion": str(version)},
            "spec": {}, "status": status}


def queued_kind(**options: Any) -> tuple[Kind, Reconciler, Objects, changes.ChangeQueue]:
    reconciler = Reconciler()
    kind = Kind(name="JobSchedule", resource=("jobwarden.io", "v1alpha1", "jobschedules"),
                reconciler=reconciler, fingerprinter=reconciler, interval=60.0, queued=True)
    runtime: Any = types.SimpleNamespace(
        kinds=[kind], kube=None, kopf_context=None, indexed=threading.Event(), paused=False,
        failed=lambda kind: None, config=OperatorConfig())
    loop = resyncing.Resync(runtime)
    objects = Objects(kind)
    loop.objects[kind.name] = objects  # type: ignore[assignment]
    queue = loop.queues[kind.name]
    for key, value in options.items():
        setattr(queue, key, value)
    return kind, reconciler, objects, queue


def watched(kind: Kind, body: dict[str, Any], type: str | None = None) -> None:
    """What the kind's watch event handler does with a body (not a deletion)."""
    kind.cache.put(body)
    handlers.queue_change(kind, type, body)


def test_a_burst_is_passed_in_batches_with_one_digest_read_and_one_write_each() -> None:
    kind, reconciler, objects, queue = queued_kind(batch=10)
    for i in range(25):
        watched(kind, obj(f"s{i}"), "ADDED")
    while queue.run_once():
        pass
    assert reconciler.digest_reads == [10, 10, 5]  # one query a batch
    assert sorted(objects.patched) == sorted(f"s{i}" for i in range(25))
    assert {trigger for _, trigger in reconciler.passes} == {"create"}
    assert queue.pending() == 0


def test_an_echo_of_the_status_write_queues_nothing_and_a_new_generation_one_pass() -> None:
    kind, reconciler, objects, queue = queued_kind()
    watched(kind, obj("a"), None)
    assert queue.run_once() == 1
    assert objects.patched == ["a"]
    # The watch delivers the status just written: a newer body, the same spec.
    watched(kind, obj("a", version=2, seen=1))
    watched(kind, obj("a", version=3, seen=1, other="a status change"))
    assert queue.run_once() == 0
    # Two spec changes while pending: one pass, from the newest body.
    watched(kind, obj("a", generation=2, version=4, seen=1))
    watched(kind, obj("a", generation=3, version=5, seen=1))
    assert queue.run_once() == 1
    assert reconciler.passes == [("a", "listed"), ("a", "update")]
    assert objects.patched == ["a", "a"]
    assert kind.cache.get("uid-a")["status"]["seen"] == 3  # type: ignore[index]


def test_a_failed_pass_is_taken_again_and_a_deleted_object_is_not() -> None:
    kind, reconciler, objects, queue = queued_kind(retry_seconds=0.0)
    reconciler.fail["a"] = 2
    watched(kind, obj("a"), "ADDED")
    watched(kind, obj("b"), "ADDED")
    queue.run_once()
    assert objects.patched == ["b"]
    queue.run_once()
    queue.run_once()
    assert objects.patched == ["b", "a"]
    assert [name for name, _ in reconciler.passes] == ["a", "b", "a", "a"]
    # Deleted while pending: forgotten, not passed.
    watched(kind, obj("c"), "ADDED")
    kind.cache.remove("uid-c")
    kind.forget("uid-c")
    assert queue.run_once() == 0
    assert queue.pending() == 0


def test_at_most_WRITERS_status_writes_are_in_flight() -> None:
    kind, _, objects, queue = queued_kind(batch=1)
    objects.hold.clear()
    queue.start()
    try:
        for i in range(3 * changes.WRITERS):
            watched(kind, obj(f"s{i}"), "ADDED")
        wait_for(lambda: objects.in_flight == changes.WRITERS, timeout=30,
                 message="every writer busy")
        assert queue.pending() == 3 * changes.WRITERS
        objects.hold.set()
        wait_for(lambda: len(objects.patched) == 3 * changes.WRITERS, timeout=30,
                 message="every status written")
    finally:
        objects.hold.set()
        queue.stop()
    assert objects.most_in_flight == changes.WRITERS
