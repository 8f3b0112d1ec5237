"""The operator-level resync loop: the time-driven work, for every cached object, in one thread.

What kopf timers did per object (and why they are gone: docs/operator.md,
"Deletion and finalizers") is done here for all of them: every ``interval`` of
its kind (``JOBWARDEN_POOL_INTERVAL`` for pools, ``JOBWARDEN_STATUS_INTERVAL``
for the others), or at once when nudged (a pod of a pool changed), an object
is reconciled from its cached body, and the status patch the reconciler built
is sent with one merge PATCH of the status subresource (only when it is not
empty: an idle object costs no API call). The answer goes back into the cache.

Besides, and slowly:

* verification: every cached object is read with one GET every
  :data:`VERIFY_SECONDS` (a deletion the watch missed leaves a phantom
  otherwise); a 404, here or on a status write, is a deletion, and the
  kind's deleter runs as for a DELETED event;
* the sweep: every :data:`SWEEP_SECONDS`, a kind with a sweeper (JobSchedule)
  compares its database rows with the cache and removes the rows of objects
  that are gone (deleted while no operator ran, or a failed cleanup), each
  one confirmed by a GET before anything is deleted.

Where kopf peering pauses this replica, the loop pauses too (the cache is then
not kept up to date, and the active replica does the work).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, cast

import kopf

from jobwarden.controller import handlers
from jobwarden.controller.kinds import Kind
from jobwarden.controller.kubeclient import CustomObjects
from jobwarden.controller.runtime import Runtime

logger = logging.getLogger("jobwarden.controller.resync")

#: Every cached object is confirmed by a GET this often (seconds).
VERIFY_SECONDS = 300.0
#: Database rows without an object are looked for this often (seconds).
SWEEP_SECONDS = 60.0
#: The loop waits this long for kopf's first listing before it starts anyway.
INDEX_WAIT_SECONDS = 60.0


class Resync:
    """Runs :meth:`run_once` in a thread until :meth:`stop`; :meth:`nudge` wakes it."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.kinds = list(runtime.kinds)
        self.objects = {kind.name: CustomObjects(runtime.kube, kind.resource)
                        for kind in self.kinds}
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._nudged: set[tuple[str, str]] = set()
        self._due: dict[tuple[str, str], float] = {}
        self._verified: dict[tuple[str, str], float] = {}
        self._swept_at: float | None = None
        self._thread: threading.Thread | None = None
        #: Completed loop passes (tests and /healthz read it).
        self.passes = 0
        for kind in self.kinds:
            kind.nudge = self._nudger(kind)

    def _nudger(self, kind: Kind) -> Any:
        def nudge(uid: str) -> None:
            with self._wake:
                self._nudged.add((kind.name, uid))
                self._wake.notify_all()
        return nudge

    # -- the thread -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name="jobwarden-operator-resync")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> tuple[bool, str]:
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "the resync thread died"
        return True, "ok"

    def run(self) -> None:
        deadline = time.monotonic() + INDEX_WAIT_SECONDS
        while not self._stop.is_set() and not self.runtime.indexed.is_set() \
                and time.monotonic() < deadline:
            self.runtime.indexed.wait(0.2)
        while not self._stop.is_set():
            if not self.runtime.paused:
                try:
                    self.run_once()
                except Exception:  # never lose the loop; every pass is counted by kind
                    logger.exception("resync pass failed")
                self.passes += 1
            self._sleep()

    def _sleep(self) -> None:
        now = time.monotonic()
        wait = min([due - now for due in self._due.values()]
                   + [kind.interval for kind in self.kinds] + [SWEEP_SECONDS])
        with self._wake:
            if not self._nudged and not self._stop.is_set():
                self._wake.wait(max(0.01, wait))

    # -- one pass ---------------------------------------------------------------------------

    def run_once(self) -> None:
        now = time.monotonic()
        with self._wake:
            nudged, self._nudged = self._nudged, set()
        for kind in self.kinds:
            uids = set(kind.cache.uids())
            for key in [k for k in self._due if k[0] == kind.name and k[1] not in uids]:
                self._due.pop(key, None)
                self._verified.pop(key, None)
            for uid in sorted(uids):
                key = (kind.name, uid)
                if key not in self._due:  # first sight: kopf's create/resume just ran
                    self._due[key] = now + kind.interval
                    self._verified[key] = now
                if key in nudged or self._due[key] <= now:
                    self._due[key] = time.monotonic() + kind.interval
                    self.reconcile(kind, uid, trigger="nudge" if key in nudged else "resync")
                if self._verified[key] + VERIFY_SECONDS <= now:
                    self._verified[key] = now
                    self.verify(kind, uid)
        if self._swept_at is None or self._swept_at + SWEEP_SECONDS <= now:
            self._swept_at = now
            self.sweep()

    def _in_context(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        context = self.runtime.kopf_context
        if context is None:
            return call(*args, **kwargs)
        return context.copy().run(call, *args, **kwargs)

    def reconcile(self, kind: Kind, uid: str, *, trigger: str) -> None:
        """One pass of one cached object, its status patch sent, the answer cached."""
        cached = kind.cache.get(uid)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return
        meta = cached.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        with kind.lock(cached):
            body = kind.cache.get(uid)  # a kopf handler may have written meanwhile
            if body is None:
                return
            patch = kopf.Patch()
            try:
                self._in_context(handlers.counted, self.runtime, kind.name,
                                 kind.reconciler.reconcile, body=as_body(body), patch=patch,
                                 trigger=trigger)
            except kopf.TemporaryError as exc:
                logger.warning("%s %s/%s not reconciled: %s", kind.name, namespace, name, exc)
                return
            except Exception:
                logger.exception("%s %s/%s: reconciliation failed", kind.name, namespace, name)
                return
            status = dict(patch.get("status") or {})
            if set(patch) - {"status"}:
                logger.warning("%s %s/%s: only status is patched by the resync loop, not %s",
                               kind.name, namespace, name, sorted(set(patch) - {"status"}))
            if not status:
                return
            try:
                updated = self.objects[kind.name].patch_status(namespace, name, status)
            except Exception as exc:
                self.runtime.failed(kind.name)
                logger.warning("%s %s/%s: status not written: %s", kind.name, namespace, name,
                               exc)
                return
        if updated is None:
            self.gone(kind, body)
        else:
            kind.cache.put(updated)

    def verify(self, kind: Kind, uid: str) -> None:
        """Confirm a cached object with a GET; a 404 is a deletion the watch did not show."""
        cached = kind.cache.get(uid)
        if cached is None:
            return
        meta = cached.get("metadata") or {}
        try:
            fresh = self.objects[kind.name].get(str(meta.get("namespace") or "default"),
                                                str(meta.get("name")))
        except Exception as exc:
            logger.warning("%s %s/%s: cannot verify it: %s", kind.name, meta.get("namespace"),
                           meta.get("name"), exc)
            return
        if fresh is None or (fresh.get("metadata") or {}).get("uid") != uid:
            self.gone(kind, cached)
        else:
            kind.cache.put(fresh)

    def gone(self, kind: Kind, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        logger.info("%s %s/%s is gone (missed its deletion)", kind.name, meta.get("namespace"),
                    meta.get("name"))
        kind.cache.remove(str(meta.get("uid")))
        if kind.deleter is not None:
            self._in_context(handlers.deleted, self.runtime, kind, as_body(body))

    def sweep(self) -> None:
        for kind in self.kinds:
            if kind.sweeper is None:
                continue
            present = {(str((b.get("metadata") or {}).get("namespace")),
                        str((b.get("metadata") or {}).get("name"))) for b in kind.cache.bodies()}
            objects = self.objects[kind.name]

            def exists(namespace: str, name: str, objects: CustomObjects = objects) -> bool:
                return objects.get(namespace, name) is not None

            try:
                kind.sweeper.sweep(present=present, exists=exists)
            except Exception as exc:
                logger.warning("%s: sweep failed (retried in %.0f s): %s", kind.name,
                               SWEEP_SECONDS, exc)


def as_body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, raw))
