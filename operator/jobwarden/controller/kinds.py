"""What the operator knows about each custom resource kind it reconciles.

A :class:`Kind` ties together the kind's reconciler (the kind-specific logic,
``reconcile(body=, patch=, trigger=)``), its optional deleter (database rows
to clean when an object goes), the cache of its objects as the watch saw them,
and one lock per object so that kopf's change handlers and the resync loop
never run two passes of one object at once.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Protocol

import kopf

from jobwarden.controller.caching import ObjectCache


class Reconciler(Protocol):
    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> object: ...


class Deleter(Protocol):
    def delete(self, *, body: kopf.Body) -> None: ...


class Sweeper(Protocol):
    def sweep(self, *, present: set[tuple[str, str]],
              exists: Callable[[str, str], bool]) -> int: ...


@dataclasses.dataclass(eq=False)
class Kind:
    name: str
    resource: tuple[str, str, str]
    reconciler: Reconciler
    #: Seconds between two resync passes of one object (time-driven work, status mirror).
    interval: float
    deleter: Deleter | None = None
    sweeper: Sweeper | None = None
    cache: ObjectCache = dataclasses.field(default_factory=ObjectCache)
    locks: collections.defaultdict[str, threading.Lock] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(threading.Lock))
    #: Set by the resync loop: wakes it for an object now (a pod of a pool changed...).
    nudge: Callable[[str], None] = lambda uid: None

    def lock(self, body: Any) -> threading.Lock:
        return self.locks[str((body.get("metadata") or {}).get("uid"))]
