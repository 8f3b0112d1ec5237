"""The status writes of a queued kind, sent by writers of their own, apart from the passes.

Why: the change queue's threads (changes.py) used to send each pass's status
PATCH themselves and wait for it before passing the next object. At a start on
a loaded API server (answers taking seconds, 504s after its 60 s timeout) the
database rows of 1,000 JobSchedules then arrived at the API server's pace, not
the database's: 473 s to every row (docs/benchmarks.md, "Operator at scale").

So a pass of a queued kind decides its status and *stages* it: the cache shows
it to every later read of the object (kube/caching.py), and the patch waits
here, by uid, with the transitions' Events the pass held. :data:`WRITERS`
threads send the waiting patches, one PATCH per object (the patches staged
meanwhile merged into one where a merge patch can say both), so at most
``WRITERS`` status writes are in flight however fast the passes go, and an
object changed again while its write waits costs one write, of the newest
status. Once a write is answered, the answer is cached, the staged patches it
carried are dropped, and the Events they held are posted (one Event per
transition, only once its status is written: kube/events.py). A write that
failed is sent again after :data:`RETRY_SECONDS`, before anything staged after
it, its Events still held; an object gone (404, or no longer cached) is
dropped. What waits when the operator stops is not sent: kopf's Event poster
is gone by then, and the next start decides those transitions again, writes
them and tells them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf

from jobwarden.controller.changes import ChangeQueue
from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.kinds import Kind

logger = logging.getLogger("jobwarden.controller.statuswrites")

#: Threads sending status writes: at most this many in flight.
WRITERS = 4
#: A failed write is sent again after this many seconds.
RETRY_SECONDS = 5.0


@dataclasses.dataclass
class Outgoing:
    """A status merge patch to send, and what depends on it."""

    patch: dict[str, Any]
    #: The cache's number of the last staged patch this one carries.
    upto: int
    #: The transitions it records: posted once it is written (kube/events.py).
    held: list[tuple[kopf.Body, st.Event]]


def composed(first: Mapping[str, Any], then: Mapping[str, Any]) -> dict[str, Any] | None:
    """One merge patch doing what ``first`` then ``then`` do; None where no merge patch
    can (``then`` sets an object where ``first`` removed or replaced one: sent as one,
    it would be merged into what the server holds)."""
    merged = dict(first)
    for key, value in then.items():
        before = merged.get(key, ...)
        if isinstance(value, Mapping) and before is not ...:
            if not isinstance(before, Mapping):
                return None
            inner = composed(before, value)
            if inner is None:
                return None
            merged[key] = inner
        else:
            merged[key] = value
    return merged


class StatusWrites:
    """The waiting status patches of one kind by uid, sent by :data:`WRITERS` threads.

    ``patch_status(namespace, name, status)`` sends one (the object as answered, None
    when it is gone); ``post(held)`` posts the Events a write recorded; ``gone(body)``
    is told of an object whose write found it deleted; ``failed()`` counts a failure.
    """

    def __init__(self, kind: Kind, *,
                 patch_status: Callable[[str, str, dict[str, Any]], dict[str, Any] | None],
                 post: Callable[[list[tuple[kopf.Body, st.Event]]], None],
                 gone: Callable[[dict[str, Any]], None],
                 failed: Callable[[], None], paused: Callable[[], bool] = lambda: False,
                 writers: int = WRITERS, retry_seconds: float = RETRY_SECONDS) -> None:
        self.kind = kind
        self.patch_status = patch_status
        self.post = post
        self.gone = gone
        self.failed = failed
        self._lock = threading.Lock()
        #: By uid: where to, and the patches to send in order (one, unless :func:`composed`
        #: could not merge them).
        self._outbox: dict[str, tuple[str, str, list[Outgoing]]] = {}
        self.queue = ChangeQueue(f"{kind.name}-status", self._send, writers=writers, batch=1,
                                 retry_seconds=retry_seconds, paused=paused)

    def stage(self, uid: str, namespace: str, name: str, status: Mapping[str, Any],
              held: Sequence[tuple[kopf.Body, st.Event]]) -> None:
        """A pass's status patch (and the transitions it records): shown by the cache at
        once, sent by a writer."""
        upto = self.kind.cache.stage_status(uid, status)
        if not upto:
            return  # not cached (deleted meanwhile): nothing to write
        with self._lock:
            outgoing = self._outbox.setdefault(uid, (namespace, name, []))[2]
            merged = composed(outgoing[-1].patch, status) if outgoing else None
            if merged is None:
                outgoing.append(Outgoing(patch=dict(status), upto=upto, held=list(held)))
            else:
                last = outgoing[-1]
                last.patch, last.upto = merged, upto
                last.held.extend(held)
        self.queue.submit(uid, "status")

    def forget(self, uid: str) -> None:
        """The object is gone: nothing of it is sent (again)."""
        with self._lock:
            self._outbox.pop(uid, None)
        self.queue.forget(uid)

    def pending(self) -> int:
        """Objects with a status write waiting or in flight."""
        return self.queue.pending()

    def start(self) -> None:
        self.queue.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.queue.stop(timeout)

    def _send(self, taken: Sequence[tuple[str, str]]) -> list[str]:
        """Send what waits for each of ``taken``; the uids whose write failed."""
        return [uid for uid, _ in taken if not self._send_one(uid)]

    def _send_one(self, uid: str) -> bool:
        with self._lock:
            waiting = self._outbox.pop(uid, None)
        if waiting is None:
            return True
        namespace, name, outgoing = waiting
        for index, item in enumerate(outgoing):
            if uid not in self.kind.cache:
                return True  # deleted meanwhile
            try:
                updated = self.patch_status(namespace, name, item.patch)
            except Exception as exc:
                self.failed()
                logger.warning("%s %s/%s: status not written (sent again): %s",
                               self.kind.name, namespace, name, exc)
                with self._lock:  # before anything staged meanwhile, its Events still held
                    later = self._outbox.get(uid, (namespace, name, []))[2]
                    self._outbox[uid] = (namespace, name, outgoing[index:] + later)
                return False
            if updated is None:
                body = self.kind.cache.get(uid)
                self.forget(uid)
                if body is not None:
                    self.gone(body)
                return True
            self.kind.cache.put(updated)
            self.kind.cache.written(uid, item.upto)
            try:
                self.post(item.held)
            except Exception as exc:  # kopf stopping: its poster is gone; the write stands
                logger.warning("%s %s/%s: Events not posted: %s", self.kind.name, namespace,
                               name, exc)
        return True
