"""An informer-style cache of watched objects: what the operator's own watch streams saw.

Why a cache and not a LIST per pass: a WorkerPool used to LIST its pods every
2 s and read its DSN Secret as often, 60 API calls a minute for an idle pool.
kopf already keeps a watch stream open for every kind it handles; the cache
keeps the last body of every object those streams delivered (kopf's indexing
step feeds it before any handler runs, and kopf holds all handlers until every
indexed kind has been listed once, so a handler never sees a half-filled
cache), and the operator's own writes go through it as well (the body the API
server answered a create, patch or delete with), so a pass right after a pod
creation counts that pod even before its watch event arrives.

Stale bodies are the price. A body is only replaced by one with a newer
``resourceVersion`` (the etcd revision: in practice a number that only grows;
kube-apiserver documents it as opaque, so a non-numeric one is always taken),
so a late watch event cannot undo a write. A deletion the watch missed (a
relist after an expired resource version) leaves a phantom: the resync loop
verifies every cached object now and then with one GET and drops what is gone
(``resyncing``), and 404 on a write drops it at once.

A status decided and not written yet (a queued kind's passes hand their status
patches to writers of their own, controller/statuswrites.py) is *staged*: the
bodies keep what the API server said, and every read of the object sees the
staged patches applied over it, in order, until the write that carries them is
answered. So the next pass reads what was decided, not the status before it,
and decides no transition twice; a watch event meanwhile (a newer spec, the
echo of an earlier write) does not undo it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

#: How long a deletion is remembered, so a late event of the deleted object is ignored.
TOMBSTONE_SECONDS = 120.0


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as a JSON merge patch (RFC 7386); pure."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def version_of(body: Mapping[str, Any]) -> int | None:
    """The resourceVersion as a number, None when it is not one (then it always wins)."""
    raw = (body.get("metadata") or {}).get("resourceVersion")
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def uid_of(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def owners_of(body: Mapping[str, Any]) -> list[str]:
    return [str(ref.get("uid")) for ref in (body.get("metadata") or {}).get("ownerReferences")
            or [] if ref.get("uid")]


class ObjectCache:
    """Bodies by uid (plain dicts, copied in and out), grouped by owner uid. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: dict[str, dict[str, Any]] = {}
        self._tombstones: dict[str, tuple[float, int | None]] = {}
        #: By uid: the staged status patches, (number, patch) in the order staged.
        self._staged: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self._stages = 0

    def put(self, body: Mapping[str, Any]) -> bool:
        """Keep ``body`` unless the same or a newer one (or its deletion) is known.

        True when the body was new: the caller's cue that something changed.
        """
        uid = uid_of(body)
        if not uid:
            return False
        version = version_of(body)
        with self._lock:
            dead = self._tombstones.get(uid)
            if dead is not None:
                if time.monotonic() - dead[0] < TOMBSTONE_SECONDS:
                    return False
                del self._tombstones[uid]
            known = self._bodies.get(uid)
            if known is not None and version is not None:
                had = version_of(known)
                if had is not None and had >= version:
                    return False  # older, or the same state again (our write's own event)
            self._bodies[uid] = copy.deepcopy(dict(body))
            return True

    def remove(self, uid: str) -> dict[str, Any] | None:
        """Forget the object (deleted); its late events are ignored for a while."""
        with self._lock:
            now = time.monotonic()
            self._tombstones = {k: v for k, v in self._tombstones.items()
                                if now - v[0] < TOMBSTONE_SECONDS}
            body = self._bodies.pop(uid, None)
            self._staged.pop(uid, None)
            self._tombstones[uid] = (now, version_of(body) if body else None)
            return body

    def stage_status(self, uid: str, status: Mapping[str, Any]) -> int:
        """A status merge patch on its way to the API server, seen by every read of the
        object from now on; its number (for :meth:`written`), 0 if nothing is cached."""
        with self._lock:
            if uid not in self._bodies:
                return 0
            self._stages += 1
            self._staged.setdefault(uid, []).append((self._stages, copy.deepcopy(dict(status))))
            return self._stages

    def written(self, uid: str, upto: int) -> None:
        """The staged patches up to number ``upto`` were written (their answer put)."""
        with self._lock:
            left = [(n, p) for n, p in self._staged.get(uid, []) if n > upto]
            if left:
                self._staged[uid] = left
            else:
                self._staged.pop(uid, None)

    def _view(self, uid: str, body: dict[str, Any]) -> dict[str, Any]:
        """The body as the operator reads it: its staged patches applied (under the lock;
        a new top-level dict where there are some, else the cached body itself)."""
        patches = self._staged.get(uid)
        if not patches:
            return body
        status = body.get("status") or {}
        for _, patch in patches:
            status = merge_patch(status, patch)
        return {**body, "status": status}

    def get(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            body = self._bodies.get(uid)
            return copy.deepcopy(self._view(uid, body)) if body is not None else None

    def uids(self) -> list[str]:
        with self._lock:
            return list(self._bodies)

    def project(self, fn: Callable[[Mapping[str, Any]], T],
                uids: Iterable[str] | None = None) -> dict[str, T]:
        """``fn`` of every cached body (of ``uids`` only, if given), by uid, without
        copying the bodies (``fn`` must only read): what the resync loop needs of
        thousands of objects each pass."""
        with self._lock:
            if uids is None:
                return {uid: fn(self._view(uid, body)) for uid, body in self._bodies.items()}
            return {uid: fn(self._view(uid, self._bodies[uid])) for uid in uids
                    if uid in self._bodies}

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(self._view(u, b)) for u, b in self._bodies.items()]

    def owned_by(self, owner_uid: str) -> list[dict[str, Any]]:
        """The cached objects with an ownerReference to ``owner_uid``."""
        with self._lock:
            return [copy.deepcopy(self._view(u, b)) for u, b in self._bodies.items()
                    if owner_uid in owners_of(b)]

    def replace_owned(self, owner_uid: str, bodies: list[dict[str, Any]]) -> None:
        """A fresh LIST of one owner's objects: what it lacks is gone, what it has is kept."""
        listed = {uid_of(b) for b in bodies}
        for uid in [u for u, b in self._snapshot().items()
                    if owner_uid in owners_of(b) and u not in listed]:
            self.remove(uid)
        for body in bodies:
            self.put(body)

    def _snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._bodies)

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._bodies

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)
