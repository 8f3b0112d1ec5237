"""What the operator knows about each custom resource kind it reconciles.

A :class:`Kind` ties together the kind's reconciler (the kind-specific logic,
``reconcile(body=, patch=, trigger=)``), its optional deleter (database rows
to clean when an object goes), the cache of its objects as the watch saw them,
and one lock per object so that kopf's change handlers and the resync loop
never run two passes of one object at once.

A kind with a :class:`Fingerprinter` (JobSchedule, ExclusiveJob) is passed by
the resync loop only when what its status shows could have changed: each
object's :class:`Mark` holds the digest of the database state its last pass
started from, and a pass is skipped while the digest read now (one query for
all due objects) is the same. Why: a pass costs several queries, and with
thousands of idle objects passing each of them every status interval was
the operator's whole idle CPU (docs/benchmarks.md, "Operator at scale").
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

import kopf

from jobwarden.controller.kube.caching import ObjectCache


class Reconciler(Protocol):
    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> object: ...


class Deleter(Protocol):
    def delete(self, *, body: kopf.Body) -> None: ...


class Sweeper(Protocol):
    def sweep(self, *, present: set[tuple[str, str]],
              exists: Callable[[str, str], bool]) -> int: ...

    def confirm(self) -> None:
        """Tell the database this operator still answers for the rows it keeps (called
        by the resync loop after a sweep has succeeded, see docs/operator.md)."""


class Fingerprinter(Protocol):
    #: Seconds an object keeps being passed every interval after its digest changed
    #: (work that follows a change later: aggregated Events).
    settle_seconds: float

    def fingerprints(self, bodies: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Hashable | None]:
        """By uid, the digest of what a pass of each object reads from the database,
        read with one query for all of them; None where a pass has time-driven work
        and must run every interval (runs in pods, a TTL, active jobs)."""
        ...


class Batcher(Protocol):
    def batch(self, bodies: Sequence[Mapping[str, Any]]
              ) -> contextlib.AbstractContextManager[Mapping[str, Hashable]]:
        """Around the passes of a batch of objects (the change queue's, changes.py), in
        the thread that runs them: what each pass would read and write on its own, read
        and written once for all of them, and what the passes in the block start from.
        Yields, by uid, the digest an object's pass starts from where the batch itself
        changed it (a row it created), read before what the pass starts from."""
        ...


#: The digest of an object no pass has started from yet.
UNSEEN = object()


@dataclasses.dataclass
class Mark:
    """What the last completed pass of one object started from."""

    digest: Hashable | None
    #: Passed every interval until then (monotonic seconds), whatever the digest.
    hot_until: float = 0.0
    #: When the resync loop first saw the object without a pass (UNSEEN only).
    since: float = 0.0
    #: Recorded by a resync pass (not kopf's handler, whose own row write -- a create --
    #: changes the digest it read before: that is no change to settle after).
    by_resync: bool = False


@dataclasses.dataclass(eq=False)
class Kind:
    name: str
    resource: tuple[str, str, str]
    reconciler: Reconciler
    #: Seconds between two resync passes of one object (time-driven work, status mirror).
    interval: float
    deleter: Deleter | None = None
    sweeper: Sweeper | None = None
    fingerprinter: Fingerprinter | None = None
    batcher: Batcher | None = None
    #: By uid: the digest the object's last pass started from (kinds with a fingerprinter).
    marks: dict[str, Mark] = dataclasses.field(default_factory=dict)
    cache: ObjectCache = dataclasses.field(default_factory=ObjectCache)
    locks: collections.defaultdict[str, threading.Lock] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(threading.Lock))
    #: Set by the resync loop: wakes it for an object now (a pod of a pool changed...).
    nudge: Callable[[str], None] = lambda uid: None
    #: Set by the resync loop: ``run_pass(uid, trigger=, digest=)`` passes the cached
    #: object now and writes its status (kopf's change handlers); False if it failed.
    run_pass: Callable[..., bool] = lambda uid, **_: False
    #: The kind's changes are passed by the operator's change queue (controller/
    #: changes.py), not by kopf's change handlers: no kopf annotation, writes bounded.
    queued: bool = False
    #: Set by the resync loop for a queued kind: ``submit(uid, trigger)`` queues a pass.
    submit: Callable[[str, str], None] = lambda uid, trigger: None
    #: ... and ``forget(uid)`` drops a deleted object from the queue.
    forget: Callable[[str], None] = lambda uid: None
    #: By uid, what the last queued pass was asked for (:func:`change_of`).
    submitted: dict[str, Hashable] = dataclasses.field(default_factory=dict)

    def lock(self, body: Any) -> threading.Lock:
        return self.locks[str((body.get("metadata") or {}).get("uid"))]


def change_of(body: Mapping[str, Any]) -> Hashable:
    """What of a body asks for a pass of a queued kind: its generation (the spec), its
    annotations (run-now) and labels. A status-only change -- the operator's own
    write, the watch's echo of it -- is no change."""
    meta = body.get("metadata") or {}
    return (meta.get("generation"), _frozen(meta.get("annotations")),
            _frozen(meta.get("labels")))


def _frozen(mapping: Any) -> Hashable:
    return tuple(sorted((str(k), str(v)) for k, v in (mapping or {}).items()))
