"""The resync loop: a pass per due object, status sent only on a change, 404 = deletion."""

from __future__ import annotations

import threading
import types
from typing import Any

import kopf

from jobwarden.controller import resyncing
from jobwarden.controller.kinds import Kind


class FakeObjects:
    """The custom resource API of one kind: what exists, and every call made."""

    def __init__(self, existing: dict[str, dict[str, Any]]) -> None:
        self.existing = existing
        self.calls: list[tuple[str, str]] = []

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        return self.existing.get(name)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        self.calls.append(("patch", name))
        found = self.existing.get(name)
        if found is None:
            return None
        meta = found["metadata"]
        found = {**found, "status": {**found.get("status", {}), **status},
                 "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}
        self.existing[name] = found
        return found


class Reconciler:
    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status
        self.passes: list[str] = []

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        self.passes.append(trigger)
        for key, value in self.status.items():
            if (body.get("status") or {}).get(key) != value:
                patch.status[key] = value
        return "ok"


class Deleter:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, *, body: kopf.Body) -> None:
        self.deleted.append(str(body["metadata"]["name"]))


def obj(name: str, version: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": str(version)}, "status": {}}


def resync_of(reconciler: Reconciler, deleter: Deleter, objects: FakeObjects
              ) -> tuple[resyncing.Resync, Kind]:
    kind = Kind(name="JobSchedule", resource=("jobwarden.io", "v1alpha1", "jobschedules"),
                reconciler=reconciler, deleter=deleter, interval=0.0)
    runtime: Any = types.SimpleNamespace(
        kinds=[kind], kube=None, kopf_context=None, indexed=threading.Event(), paused=False,
        failed=lambda kind: None)
    loop = resyncing.Resync(runtime)
    loop.objects[kind.name] = objects  # type: ignore[assignment]
    return loop, kind


def test_a_changed_status_is_sent_once_and_an_unchanged_one_not_at_all():
    objects = FakeObjects({"a": obj("a")})
    reconciler, deleter = Reconciler({"phase": "Ready"}), Deleter()
    loop, kind = resync_of(reconciler, deleter, objects)
    kind.cache.put(obj("a"))
    loop.reconcile(kind, "uid-a", trigger="resync")
    loop.reconcile(kind, "uid-a", trigger="resync")  # the cache holds the answer now
    assert reconciler.passes == ["resync", "resync"]
    assert objects.calls == [("patch", "a")]
    assert kind.cache.get("uid-a")["status"] == {"phase": "Ready"}


def test_a_404_on_the_status_write_is_a_deletion_the_watch_missed():
    objects = FakeObjects({})
    reconciler, deleter = Reconciler({"phase": "Ready"}), Deleter()
    loop, kind = resync_of(reconciler, deleter, objects)
    kind.cache.put(obj("gone"))
    loop.reconcile(kind, "uid-gone", trigger="resync")
    assert deleter.deleted == ["gone"]
    assert kind.cache.get("uid-gone") is None


def test_verification_drops_a_phantom_and_keeps_a_live_object_with_its_fresh_body():
    objects = FakeObjects({"live": obj("live", version=7)})
    reconciler, deleter = Reconciler({}), Deleter()
    loop, kind = resync_of(reconciler, deleter, objects)
    kind.cache.put(obj("live", version=3))
    kind.cache.put(obj("phantom"))
    loop.verify(kind, "uid-live")
    loop.verify(kind, "uid-phantom")
    assert deleter.deleted == ["phantom"]
    assert kind.cache.get("uid-live")["metadata"]["resourceVersion"] == "7"
    assert kind.cache.get("uid-phantom") is None


def test_a_nudge_wakes_the_loop_for_that_object_only():
    objects = FakeObjects({"a": obj("a"), "b": obj("b")})
    reconciler, deleter = Reconciler({}), Deleter()
    loop, kind = resync_of(reconciler, deleter, objects)
    kind.interval = 3600.0
    kind.cache.put(obj("a"))
    kind.cache.put(obj("b"))
    loop.run_once()  # first sight: both due an interval from now (kopf's resume just ran)
    assert reconciler.passes == []
    kind.nudge("uid-b")
    loop.run_once()
    assert reconciler.passes == ["nudge"]
