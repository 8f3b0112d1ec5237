"""The resync loop: a pass per due object, status sent only on a change, 404 = deletion;
with a fingerprinter, no pass (and no query of its own) for an object whose digest held;
the one status writer (kopf's change handlers too), which tells a transition once."""

from __future__ import annotations

import threading
import types
from typing import Any

import kopf

from jobwarden.controller import handlers, resyncing
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.kube import events
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.kinds import Kind, Mark


class FakeObjects:
    """The custom resource API of one kind: what exists, and every call made."""

    def __init__(self, existing: dict[str, dict[str, Any]]) -> None:
        self.existing = existing
        self.calls: list[tuple[str, str]] = []
        #: Status writes still to fail (a timeout, a refusal).
        self.refuse = 0

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        return self.existing.get(name)

    def list(self, namespaces: Any = (), *, page: int = 500) -> list[dict[str, Any]]:
        self.calls.append(("list", ""))
        return list(self.existing.values())

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        self.calls.append(("patch", name))
        if self.refuse:
            self.refuse -= 1
            raise TimeoutError("the API server did not answer")
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
        failed=lambda kind: None, config=OperatorConfig())
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


class RollingOut:
    """A pass that finds a rollout to start: ``phase: Rolling`` and its Event when the
    status it read does not say so yet, and a count that moves every pass (as a
    pool's ready pods do), so that every pass writes."""

    def __init__(self) -> None:
        self.passes = 0

    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> str:
        self.passes += 1
        patch.status["passes"] = self.passes
        if (body.get("status") or {}).get("phase") != "Rolling":
            patch.status["phase"] = "Rolling"
            events.post_with_status(body, [st.Event(type="Normal", reason="RolloutStarted",
                                                    message="rolling out")])
        return "ok"


def told(monkeypatch: Any) -> list[str]:
    """The reasons of the Events posted (kopf's poster, which needs its running loop)."""
    posted: list[str] = []
    monkeypatch.setattr(kopf, "event", lambda body, **event: posted.append(event["reason"]))
    return posted


def test_a_transition_is_told_only_by_the_pass_whose_status_write_succeeded(monkeypatch):
    posted = told(monkeypatch)
    objects = FakeObjects({"a": obj("a")})
    reconciler = RollingOut()
    loop, kind = resync_of(reconciler, Deleter(), objects)  # type: ignore[arg-type]
    kind.cache.put(obj("a"))
    objects.refuse = 1
    assert not loop.reconcile(kind, "uid-a", trigger="resync")
    assert posted == []  # decided, but not recorded: not told
    assert loop.reconcile(kind, "uid-a", trigger="resync")
    assert loop.reconcile(kind, "uid-a", trigger="resync")
    assert posted == ["RolloutStarted"]
    assert objects.existing["a"]["status"] == {"phase": "Rolling", "passes": 3}


def test_a_transition_seen_by_kopfs_handler_and_then_the_loop_is_told_once(monkeypatch):
    """kopf's change handler and the loop pass one object in turn. Both write through
    one writer, so the loop's pass reads the status the handler's pass wrote, even when
    the loop writes before the watch shows that (issue 27: ``RolloutStarted`` x2)."""
    posted = told(monkeypatch)
    objects = FakeObjects({"a": obj("a")})
    reconciler = RollingOut()
    runtime: Any = types.SimpleNamespace(
        kinds=[], kube=None, kopf_context=None, indexed=threading.Event(), paused=False,
        failed=lambda kind: None, config=OperatorConfig())
    registry = kopf.OperatorRegistry()
    kind = handlers.register(registry, runtime, kind="WorkerPool",
                             resource=("jobwarden.io", "v1alpha1", "workerpools"),
                             reconciler=reconciler, interval=0.0)
    loop = resyncing.Resync(runtime)
    loop.objects[kind.name] = objects  # type: ignore[assignment]
    (on_update,) = [h.fn for h in registry._changing.get_all_handlers()
                    if "update" in str(h.reason)]
    kind.cache.put(obj("a"))  # kopf's indexing step, before its handlers
    on_update(body=kopf.Body(obj("a")), patch=kopf.Patch(), reason="update")
    loop.reconcile(kind, "uid-a", trigger="nudge")  # the new pods nudged the loop
    loop.reconcile(kind, "uid-a", trigger="resync")
    assert posted == ["RolloutStarted"]


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
    loop.verify(kind)
    # One LIST for the kind; a GET only for what the cache holds and the listing lacks.
    assert objects.calls == [("list", ""), ("get", "phantom")]
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


class Sweeper:
    """A JobSchedule-like sweeper whose sweeps fail while ``failing``."""

    def __init__(self) -> None:
        self.failing = True
        self.sweeps = 0
        self.confirmations = 0

    def sweep(self, *, present: set[tuple[str, str]], exists: Any) -> int:
        self.sweeps += 1
        if self.failing:
            raise RuntimeError("API server unreachable")
        return 0

    def confirm(self) -> None:
        self.confirmations += 1


def test_the_owner_is_confirmed_only_after_a_sweep_succeeded():
    """A returning operator deletes what went while it was away before it lets runners
    fire its rows again; then it confirms every renewal period, and stops once its
    sweeps have failed for longer than the grace (docs/schedules.md)."""
    sweeper = Sweeper()
    loop, kind = resync_of(Reconciler({}), Deleter(), FakeObjects({}))
    kind.sweeper = sweeper
    config = OperatorConfig(owner_grace_seconds=10)
    loop.runtime.config = config
    loop.run_once()
    assert (sweeper.sweeps, sweeper.confirmations) == (1, 0)
    sweeper.failing = False
    loop._swept_at = None  # the next sweep is due
    loop.run_once()
    assert (sweeper.sweeps, sweeper.confirmations) == (2, 1)
    loop.run_once()  # within the renewal period: nothing sent
    assert sweeper.confirmations == 1
    loop._confirmed_at = -1e9
    loop.confirm(now=0.0)
    assert sweeper.confirmations == 2
    # Sweeps failing for longer than the grace: no more confirmations.
    loop._failing_since = 0.0
    loop._confirmed_at = -1e9
    loop.confirm(now=config.owner_grace_seconds + 1.0)
    assert sweeper.confirmations == 2
    loop.confirm(now=config.owner_grace_seconds - 1.0)
    assert sweeper.confirmations == 3


class Digests:
    """A fingerprinter over a dict the test changes: one 'query' per call, counted."""

    settle_seconds = 0.0

    def __init__(self, digests: dict[str, Any]) -> None:
        self.digests = digests
        self.queries: list[int] = []

    def fingerprints(self, bodies: Any) -> dict[str, Any]:
        self.queries.append(len(bodies))
        return {b["metadata"]["uid"]: self.digests.get(b["metadata"]["name"]) for b in bodies}


def fingerprinted(count: int) -> tuple[resyncing.Resync, Kind, Reconciler, Digests, FakeObjects]:
    """``count`` objects due at every pass, each handled once by kopf (its digest marked)."""
    names = [f"o{i}" for i in range(count)]
    objects = FakeObjects({n: obj(n) for n in names})
    reconciler = Reconciler({})
    loop, kind = resync_of(reconciler, Deleter(), objects)
    digests = Digests({n: "d1" for n in names})
    kind.fingerprinter = digests
    for name in names:
        kind.cache.put(obj(name))
        kind.marks[f"uid-{name}"] = Mark(digest="d1")
    loop._listed_at[kind.name] = float("inf")  # no verification LIST in these passes
    loop._swept_at = float("inf")
    return loop, kind, reconciler, digests, objects


def test_idle_objects_cost_one_digest_query_per_pass_and_no_pass_or_api_call():
    loop, _, reconciler, digests, objects = fingerprinted(50)
    for _ in range(5):
        loop.run_once()
    assert reconciler.passes == []
    assert objects.calls == []
    assert digests.queries == [50] * 5  # all due objects in one query, each pass
    assert loop.skipped == 250


def test_a_changed_digest_passes_that_object_once_and_a_none_digest_every_time():
    loop, _, reconciler, digests, _ = fingerprinted(20)
    digests.digests["o3"] = "d2"  # its row changed
    digests.digests["o7"] = None  # time-driven work (a pod template, active jobs)
    loop.run_once()
    assert sorted(reconciler.passes) == ["resync", "resync"]
    loop.run_once()  # o3's new digest is recorded; o7 is passed again
    loop.run_once()
    assert len(reconciler.passes) == 4


def test_a_changed_object_keeps_being_passed_for_the_settle_time():
    loop, kind, reconciler, digests, _ = fingerprinted(3)
    digests.settle_seconds = 3600.0
    digests.digests["o0"] = "d2"  # last passed by kopf's handler, which created its row
    kind.marks["uid-o1"] = Mark(digest="d1", by_resync=True)
    digests.digests["o1"] = "d2"  # last passed by the loop: changed by someone else
    for _ in range(3):
        loop.run_once()
    # o0 once (its own create is no change to settle after); o1 at every due pass, so
    # that Events aggregated meanwhile are posted.
    assert reconciler.passes == ["resync"] * 4
    kind.marks["uid-o1"].hot_until = 0.0
    loop.run_once()
    assert reconciler.passes == ["resync"] * 4


def test_an_object_kopf_has_not_handled_yet_is_left_to_kopf_for_the_grace():
    loop, kind, reconciler, _, _ = fingerprinted(1)
    kind.marks.clear()  # kopf's create/resume handler has not run for it yet
    loop.run_once()
    loop.run_once()
    assert reconciler.passes == []
    kind.marks["uid-o0"].since -= resyncing.UNSEEN_GRACE_SECONDS  # kopf never got to it
    loop.run_once()
    assert reconciler.passes == ["resync"]
    loop.run_once()  # its digest is recorded now
    assert reconciler.passes == ["resync"]


def test_digests_that_cannot_be_read_pass_nothing_and_keep_the_loop():
    loop, _, reconciler, digests, _ = fingerprinted(5)

    def down(bodies: Any) -> dict[str, Any]:
        raise RuntimeError("database unavailable")

    digests.fingerprints = down  # type: ignore[method-assign]
    loop.run_once()
    assert reconciler.passes == []
