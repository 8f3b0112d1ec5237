"""The change queue of a queued kind (JobSchedule): batches, retries, and its status writes.

The resync loop's pass with fakes for the API (every call recorded) and the
reconciler; the queue's threads and the status writers (statuswrites.py) run
for real, or one step at a time (``run_once``).
"""

from __future__ import annotations

import dataclasses
import threading
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import kopf
import pytest

from jobwarden.controller import changes, handlers, resyncing, statuswrites
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.kube import events
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.kinds import UNSEEN, Kind, Mark
from tests.support.waiting import wait_for


class Objects:
    """The custom resource API of one kind; ``hold`` keeps status writes waiting,
    ``fail`` refuses the next writes of a name."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        #: The status writes answered: (name, the patch).
        self.written: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, int] = {}
        #: By name: the status as the server holds it.
        self.statuses: dict[str, dict[str, Any]] = {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.hold = threading.Event()
        self.hold.set()
        self._lock = threading.Lock()

    @property
    def patched(self) -> list[str]:
        return [name for name, _ in self.written]

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.hold.wait()
            with self._lock:
                if self.fail.get(name, 0) > 0:
                    self.fail[name] -= 1
                    raise RuntimeError("504 Gateway Timeout")
                self.written.append((name, status))
                self.statuses.setdefault(name, {}).update(status)
                # The object as the server answers: the status merged, the next version.
                body = self.kind.cache.get(f"uid-{name}") or {}
                meta = body.get("metadata") or {}
                return {**body, "status": dict(self.statuses[name]),
                        "metadata": {**meta, "resourceVersion":
                                     str(int(meta["resourceVersion"]) + 1)}}
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
            events.post_with_status(body, [st.Event(type="Normal", reason="Seen",
                                                    message=f"generation {generation}")])
        return "ok"

    def fingerprints(self, bodies: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Hashable | None]:
        self.digest_reads.append(len(bodies))
        return {str(b["metadata"]["uid"]): "digest" for b in bodies}


def obj(name: str, generation: int = 1, version: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": generation, "resourceVersion": str(version)},
            "spec": {}, "status": status}


@dataclasses.dataclass
class Queued:
    loop: resyncing.Resync
    kind: Kind
    reconciler: Reconciler
    objects: Objects
    queue: changes.ChangeQueue
    writes: statuswrites.StatusWrites


def queued_kind(**options: Any) -> Queued:
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
    return Queued(loop=loop, kind=kind, reconciler=reconciler, objects=objects, queue=queue,
                  writes=loop.writes[kind.name])


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The Events posted (name, reason): kopf's poster is not running here."""
    found: list[tuple[str, str]] = []

    def post(body: kopf.Body, told: Any) -> None:
        found.extend((str(body["metadata"]["name"]), event.reason) for event in told)
    monkeypatch.setattr(events, "post", post)
    return found


def drain(q: Queued) -> None:
    """Every pending pass, then every pending status write, one step at a time."""
    while q.queue.pending():
        q.queue.run_once()
    write(q)


def write(q: Queued) -> None:
    """Every pending status write (retries due at once), one step at a time."""
    while q.writes.pending():
        q.writes.queue.run_once()


def watched(kind: Kind, body: dict[str, Any], type: str | None = None) -> None:
    """What the kind's watch event handler does with a body (not a deletion)."""
    kind.cache.put(body)
    handlers.queue_change(kind, type, body)


def test_a_burst_is_passed_in_batches_with_one_digest_read_and_one_write_each() -> None:
    q = queued_kind(batch=10)
    for i in range(25):
        watched(q.kind, obj(f"s{i}"), "ADDED")
    drain(q)
    assert q.reconciler.digest_reads == [10, 10, 5]  # one query a batch
    assert sorted(q.objects.patched) == sorted(f"s{i}" for i in range(25))
    assert {trigger for _, trigger in q.reconciler.passes} == {"create"}
    assert q.queue.pending() == 0 and q.writes.pending() == 0


def test_an_echo_of_the_status_write_queues_nothing_and_a_new_generation_one_pass() -> None:
    q = queued_kind()
    watched(q.kind, obj("a"), None)
    drain(q)
    assert q.objects.patched == ["a"]
    # The watch delivers the status just written: a newer body, the same spec.
    watched(q.kind, obj("a", version=2, seen=1))
    watched(q.kind, obj("a", version=3, seen=1, other="a status change"))
    assert q.queue.run_once() == 0
    # Two spec changes while pending: one pass, from the newest body.
    watched(q.kind, obj("a", generation=2, version=4, seen=1))
    watched(q.kind, obj("a", generation=3, version=5, seen=1))
    assert q.queue.run_once() == 1
    drain(q)
    assert q.reconciler.passes == [("a", "listed"), ("a", "update")]
    assert q.objects.patched == ["a", "a"]
    assert q.kind.cache.get("uid-a")["status"]["seen"] == 3  # type: ignore[index]


def test_a_failed_pass_is_taken_again_and_a_deleted_object_is_not() -> None:
    q = queued_kind(retry_seconds=0.0)
    q.reconciler.fail["a"] = 2
    watched(q.kind, obj("a"), "ADDED")
    watched(q.kind, obj("b"), "ADDED")
    q.queue.run_once()
    write(q)
    assert q.objects.patched == ["b"]
    drain(q)
    assert q.objects.patched == ["b", "a"]
    assert [name for name, _ in q.reconciler.passes] == ["a", "b", "a", "a"]
    # Deleted while pending: forgotten, not passed.
    watched(q.kind, obj("c"), "ADDED")
    q.kind.cache.remove("uid-c")
    q.kind.forget("uid-c")
    assert q.queue.run_once() == 0
    assert q.queue.pending() == 0


def test_passes_go_on_while_status_writes_wait_and_at_most_WRITERS_are_in_flight() -> None:
    """A slow API server delays the statuses, not the next objects' passes (their rows)."""
    q = queued_kind(batch=1)
    q.objects.hold.clear()
    q.queue.start()
    q.writes.start()
    count = 3 * statuswrites.WRITERS
    try:
        for i in range(count):
            watched(q.kind, obj(f"s{i}"), "ADDED")
        wait_for(lambda: len(q.reconciler.passes) == count, timeout=60,
                 message="every object passed while its status write waits")
        wait_for(lambda: q.objects.in_flight == statuswrites.WRITERS, timeout=60,
                 message="every status writer busy")
        assert q.writes.pending() == count and q.objects.patched == []
        # What each pass decided is what the cache shows, written or not.
        assert all(q.kind.cache.get(f"uid-s{i}")["status"] == {"seen": 1}  # type: ignore[index]
                   for i in range(count))
        q.objects.hold.set()
        wait_for(lambda: len(q.objects.patched) == count, timeout=60,
                 message="every status written")
    finally:
        q.objects.hold.set()
        q.queue.stop()
        q.writes.stop()
    assert q.objects.most_in_flight == statuswrites.WRITERS
    assert sorted(q.objects.patched) == sorted(f"s{i}" for i in range(count))  # one each


def test_an_object_changed_while_its_write_waits_costs_one_write_of_the_newest_status(
        posted: list[tuple[str, str]]) -> None:
    q = queued_kind()
    watched(q.kind, obj("a"), "ADDED")
    q.queue.run_once()
    # Not written yet: the watch delivers two spec changes (bodies without the status).
    watched(q.kind, obj("a", generation=2, version=2))
    q.queue.run_once()
    watched(q.kind, obj("a", generation=3, version=3))
    q.queue.run_once()
    assert [trigger for _, trigger in q.reconciler.passes] == ["create", "update", "update"]
    assert q.objects.written == []
    assert posted == []  # a transition is told once its status is written
    write(q)
    assert q.objects.written == [("a", {"seen": 3})]
    assert posted == [("a", "Seen")] * 3  # generation 1, 2, 3: each transition once
    assert q.kind.cache.get("uid-a")["status"] == {"seen": 3}  # type: ignore[index]


def test_a_failed_status_write_is_sent_again_before_a_newer_one_and_told_once(
        posted: list[tuple[str, str]]) -> None:
    q = queued_kind()
    q.writes.queue.retry_seconds = 0.0
    q.objects.fail["a"] = 1
    watched(q.kind, obj("a"), "ADDED")
    q.queue.run_once()
    assert q.writes.queue.run_once() == 1  # refused
    assert q.objects.written == [] and posted == []
    # The cache still shows what was decided: a pass now decides nothing again.
    assert q.kind.cache.get("uid-a")["status"] == {"seen": 1}  # type: ignore[index]
    watched(q.kind, obj("a", version=2))  # a newer body from the watch, without it
    q.kind.run_pass("uid-a", trigger="resync")
    assert posted == []
    watched(q.kind, obj("a", generation=2, version=3))
    q.queue.run_once()
    write(q)
    assert q.objects.written == [("a", {"seen": 2})]
    assert posted == [("a", "Seen"), ("a", "Seen")]  # generation 1, then 2
    assert q.writes.pending() == 0


def test_no_status_is_written_for_an_object_deleted_while_its_write_waits() -> None:
    q = queued_kind()
    watched(q.kind, obj("a"), "ADDED")
    watched(q.kind, obj("b"), "ADDED")
    q.queue.run_once()
    q.kind.cache.remove("uid-a")
    q.kind.forget("uid-a")
    write(q)
    assert q.objects.patched == ["b"]


def test_patches_staged_in_turn_are_sent_as_one_where_a_merge_patch_can_say_both() -> None:
    assert statuswrites.composed({"a": 1, "c": {"x": 1}}, {"b": 2, "c": {"y": None}}) == \
        {"a": 1, "b": 2, "c": {"x": 1, "y": None}}
    assert statuswrites.composed({"a": {"x": 1}}, {"a": None}) == {"a": None}
    # An object set where the first removed or replaced one: merged into the server's
    # object if sent as one, so sent as two.
    assert statuswrites.composed({"a": None}, {"a": {"y": 2}}) is None
    assert statuswrites.composed({"a": [1]}, {"a": {"y": 2}}) is None


def test_the_resync_loop_leaves_an_object_its_change_queue_holds_to_the_queue() -> None:
    """At a start with thousands of new objects the queue has not reached some of them
    when the loop's grace for objects no pass has started from is over; the loop passing
    them too was a second pass of each (docs/benchmarks.md, "Scale (issue 31)")."""
    q = queued_kind(batch=2, retry_seconds=3600.0)
    q.loop._listed_at[q.kind.name] = float("inf")  # no verification LIST in these passes
    q.loop._swept_at = float("inf")
    for name in ["a", "b", "c", "d"]:
        watched(q.kind, obj(name), "ADDED")
    q.reconciler.fail["d"] = 1
    assert q.queue.run_once() == 2  # a and b
    assert q.queue.run_once() == 2  # c, and d whose pass failed: held for its retry
    watched(q.kind, obj("e"), "ADDED")  # pending
    assert q.queue.pending() == 2
    for name in ["a", "b", "c", "d", "e"]:
        q.loop._due[(q.kind.name, f"uid-{name}")] = 0.0  # due now
    for name in ["d", "e"]:  # no pass has started from them, and the grace is over
        q.kind.marks[f"uid-{name}"] = Mark(digest=UNSEEN, since=1.0)
    q.reconciler.passes.clear()
    q.loop.run_once()
    assert q.reconciler.passes == []  # a, b, c unchanged; d and e the queue's
    assert q.loop.left_to_queue == 2
    drain_retries(q)
    assert sorted(q.reconciler.passes) == [("d", "create"), ("e", "create")]
    # No longer held: due objects are the loop's again.
    for name in ["d", "e"]:
        q.loop._due[(q.kind.name, f"uid-{name}")] = 0.0
        q.kind.marks[f"uid-{name}"].hot_until = float("inf")
    q.loop.run_once()
    assert sorted(q.reconciler.passes) == [("d", "create"), ("d", "resync"),
                                           ("e", "create"), ("e", "resync")]


def drain_retries(q: Queued) -> None:
    """Every pass, retries taken at once."""
    with q.queue._wake:
        q.queue._retry = {uid: (0.0, trigger) for uid, (_, trigger) in q.queue._retry.items()}
    drain(q)
