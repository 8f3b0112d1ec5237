"""The operator-level resync loop: the time-driven work, for every cached object, in one thread.

What kopf timers did per object (and why they are gone: docs/operator.md,
"Deletion and finalizers") is done here for all of them: every ``interval`` of
its kind (``JOBWARDEN_POOL_INTERVAL`` for pools, ``JOBWARDEN_STATUS_INTERVAL``
for the others), or at once when nudged (a pod of a pool changed), an object
is reconciled from its cached body, and the status patch the reconciler built
is sent with one merge PATCH of the status subresource (only when it is not
empty: an idle object costs no API call). The answer goes back into the cache.
A queued kind's (JobSchedule's, ExclusiveJob's) patch goes to its status writers instead
(statuswrites.py), so no pass waits for the API server.
A kind with a fingerprinter (JobSchedule, ExclusiveJob) reads the digests of
its due objects with one query and passes only those whose digest changed
since their last pass (kinds.py says why), those with time-driven work, and
those that changed lately (for :attr:`Fingerprinter.settle_seconds`): an idle
object costs neither an API call nor a query of its own. A queued kind's object
its change queue holds (pending, to be retried, being passed) is left to the
queue: at a start with thousands of new objects, the loop passing the ones the
queue had not reached yet was a second pass of each (docs/benchmarks.md).

Besides, and slowly:

* verification: every :data:`VERIFY_SECONDS` each kind is listed (pages of
  :data:`LIST_PAGE`; a few requests per kind, not one per object) and what
  the cache holds that the listing lacks is confirmed with a GET (a deletion
  the watch missed leaves a phantom otherwise); a 404, here or on a status
  write, is a deletion, and the kind's deleter runs as for a DELETED event;
* the sweep: every :data:`SWEEP_SECONDS`, a kind with a sweeper (JobSchedule)
  compares its database rows with the cache and the last listing and removes
  the rows of objects that are gone (deleted while no operator ran, or a
  failed cleanup), each one confirmed by a GET before anything is deleted.
  The loop lists every kind once before its first sweep, so an operator
  whose cache is still filling does not GET every row it has not seen yet;
* the owner's confirmation: every ``owner_renew_seconds``, once a first sweep
  has succeeded (so an operator that returns deletes what was deleted while it
  was away *before* runners may fire those rows again) and while sweeps have
  not kept failing for longer than the grace, the sweeper renews this
  operator's confirmation of its rows. Without it, runners suspend the rows
  after the grace (docs/schedules.md, "Rows whose owner is gone").

Where kopf peering pauses this replica, the loop pauses too (the cache is then
not kept up to date, and the active replica does the work).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Hashable, Mapping
from typing import Any, cast

import kopf

from jobwarden.controller import handlers, heap
from jobwarden.controller.changes import ChangeQueue
from jobwarden.controller.kube import events
from jobwarden.controller.kube.client import CustomObjects
from jobwarden.controller.kube.kinds import UNSEEN, Kind, Mark
from jobwarden.controller.runtime import Runtime
from jobwarden.controller.statuswrites import StatusWrites
from jobwarden.maintenance.looping import Progress, stalled
from jobwarden.observability import metrics

logger = logging.getLogger("jobwarden.controller.resync")

#: Every kind is listed (and cached objects it lacks confirmed by a GET) this often.
VERIFY_SECONDS = 300.0
#: Objects per LIST request of the verification.
LIST_PAGE = 500
#: An object the loop sees before any pass started from its digest (kopf's create or
#: resume handler, or the change queue's pass, has not run yet: at a start, they work
#: through thousands) is left to them this long, then passed by the loop -- but for
#: an object its kind's change queue still holds, which is left to the queue.
UNSEEN_GRACE_SECONDS = 60.0
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
        #: By kind: when it was last listed, and the (namespace, name)s listed.
        self._listed_at: dict[str, float] = {}
        self._listed: dict[str, set[tuple[str, str]]] = {}
        #: Passes skipped because the digest had not changed (tests read it).
        self.skipped = 0
        #: Due objects left to their kind's change queue, which held them (tests read it).
        self.left_to_queue = 0
        self._swept_at: float | None = None
        #: A sweep has succeeded since start; the first failure of the current run of
        #: failing sweeps (None: the last one succeeded); the last confirmation.
        self._swept_ok = False
        self._failing_since: float | None = None
        self._confirmed_at: float | None = None
        self._thread: threading.Thread | None = None
        #: Completed loop passes (tests and /healthz read it).
        self.passes = 0
        #: The pass in progress (/healthz: a pass stuck longer than the stall bound).
        self.progress = Progress("resync")
        for kind in self.kinds:
            kind.nudge = self._nudger(kind)
            kind.run_pass = functools.partial(self.reconcile, kind, by_resync=False)
        #: By kind: the change queue of a queued kind (changes.py), and its status writes
        #: (statuswrites.py: every pass of the kind stages its status, writers send it).
        self.queues: dict[str, ChangeQueue] = {}
        self.writes: dict[str, StatusWrites] = {}
        for kind in self.kinds:
            if kind.queued:
                queue = ChangeQueue(kind.name, self._passer(kind),
                                    paused=lambda: bool(self.runtime.paused))
                writes = StatusWrites(
                    kind, patch_status=functools.partial(self.patch_status, kind),
                    post=functools.partial(self._in_context, events.post_held),
                    gone=functools.partial(self.gone, kind),
                    failed=functools.partial(self.runtime.failed, kind.name),
                    paused=lambda: bool(self.runtime.paused))
                kind.submit = queue.submit
                kind.forget = functools.partial(_forget, queue, writes)
                self.queues[kind.name], self.writes[kind.name] = queue, writes

    def _passer(self, kind: Kind) -> Any:
        def process(taken: list[tuple[str, str]]) -> list[str]:
            """A batch of changed objects: their digests with one query, then a pass of
            each (inside the kind's batch, when it has a batcher: what the passes read and
            write, read and written once for all of them; where that fails, each pass
            reads and writes its own, so one object cannot hold up the others); the
            uids whose pass failed (taken again later)."""
            now = time.monotonic()
            uids = [uid for uid, _ in taken]
            digests = self.digests(kind, uids, now)
            if digests is None:
                return uids
            with contextlib.ExitStack() as batch:
                started: Mapping[str, Hashable] = {}
                if kind.batcher is not None:
                    bodies = list(kind.cache.project(_identity, uids).values())
                    try:
                        started = batch.enter_context(kind.batcher.batch(bodies))
                    except Exception as exc:
                        logger.warning("%s: a batch of %d not prepared, each passed on its "
                                       "own: %s", kind.name, len(uids), exc)
                return [uid for uid, trigger in taken
                        if not self.reconcile(kind, uid, trigger=trigger,
                                              digest=_started(digests, started, uid),
                                              now=now, by_resync=False)]
        return process

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
        for queue in self.queues.values():
            queue.start()
        for writes in self.writes.values():
            writes.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        for queue in self.queues.values():
            queue.stop(timeout)
        for writes in self.writes.values():
            writes.stop(timeout)

    def alive(self) -> tuple[bool, str]:
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "the resync thread died"
        stuck = stalled([self.progress], self.runtime.config.stall_seconds)
        return (False, stuck) if stuck else (True, "ok")

    def run(self) -> None:
        deadline = time.monotonic() + INDEX_WAIT_SECONDS
        while not self._stop.is_set() and not self.runtime.indexed.is_set() \
                and time.monotonic() < deadline:
            self.runtime.indexed.wait(0.2)
        while not self._stop.is_set():
            if not self.runtime.paused:
                self.progress.begin()
                try:
                    self.run_once()
                except Exception:  # never lose the loop; every pass is counted by kind
                    logger.exception("resync pass failed")
                finally:
                    self.progress.end()
                self.passes += 1
            self._sleep()

    def _sleep(self) -> None:
        """Until the next object is due, but at least half the shortest interval: the
        objects' due times are spread, and each pass walks every cached object."""
        now = time.monotonic()
        intervals = [kind.interval for kind in self.kinds]
        wait = min([due - now for due in self._due.values()]
                   + intervals + [SWEEP_SECONDS] + [self.runtime.config.owner_renew_seconds])
        if intervals:
            wait = max(wait, min(intervals) / 2)
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
                kind.marks.pop(key[1], None)
            # What the kind's change queue holds is passed by it soon, from the newest
            # body: a pass here would be a second one (at a start with thousands queued,
            # the loop's passes of the objects the queue has not reached yet).
            queue = self.queues.get(kind.name)
            held = queue.holding() if queue is not None else frozenset()
            due: list[str] = []
            for uid in sorted(uids):
                key = (kind.name, uid)
                if key not in self._due:  # first sight: kopf's create/resume just ran
                    self._due[key] = now + kind.interval
                if key in nudged or self._due[key] <= now:
                    self._due[key] = time.monotonic() + kind.interval
                    if uid in held and key not in nudged:
                        self.left_to_queue += 1
                        continue
                    due.append(uid)
            digests = self.digests(kind, due, now)
            if digests is None:
                continue
            for uid in due:
                key = (kind.name, uid)
                if key not in nudged and self.unchanged(kind, uid, digests, now):
                    self.skipped += 1
                    metrics.OPERATOR_PASSES_SKIPPED.labels(kind.name).inc()
                    continue
                self.reconcile(kind, uid, trigger="nudge" if key in nudged else "resync",
                               digest=digests.get(uid, UNSEEN), now=now)
        for kind in self.kinds:
            if self._listed_at.get(kind.name, -VERIFY_SECONDS) + VERIFY_SECONDS <= now:
                self.verify(kind)
                self._listed_at[kind.name] = now
        if self._swept_at is None or self._swept_at + SWEEP_SECONDS <= now:
            self._swept_at = now
            if self.sweep():
                self._swept_ok, self._failing_since = True, None
            elif self._failing_since is None:
                self._failing_since = now
            heap.trim()  # the start's peak, freed, back to the system (heap.py)
        self.confirm(now)

    def digests(self, kind: Kind, due: list[str], now: float
                ) -> dict[str, Hashable | None] | None:
        """The due objects' digests (one query), {} for a kind without a fingerprinter,
        None when they cannot be read (this pass of the kind is skipped)."""
        if kind.fingerprinter is None or not due:
            return {}
        bodies = list(kind.cache.project(_identity, due).values())
        try:
            return kind.fingerprinter.fingerprints(bodies)
        except Exception as exc:
            self.runtime.failed(kind.name)
            logger.warning("%s: digests not read, %d due object(s) passed later: %s",
                           kind.name, len(due), exc)
            return None

    def unchanged(self, kind: Kind, uid: str, digests: dict[str, Hashable | None],
                  now: float) -> bool:
        """May the pass of a due object be skipped? Only with a fingerprinter, a digest
        that is not None and equals the one its last pass started from, and no recent
        change. An object no pass has started from yet is kopf's for a grace period."""
        if kind.fingerprinter is None:
            return False
        digest = digests.get(uid, UNSEEN)
        mark = kind.marks.get(uid)
        if mark is None:
            kind.marks[uid] = Mark(digest=UNSEEN, since=now)
            return True
        if mark.digest is UNSEEN:
            return mark.since > 0 and now - mark.since < UNSEEN_GRACE_SECONDS
        return digest is not None and digest is not UNSEEN and digest == mark.digest \
            and now >= mark.hot_until

    def confirm(self, now: float) -> None:
        """Renew the owner's confirmation when it is due and the sweeps allow it."""
        config = self.runtime.config
        if not self._swept_ok or (self._failing_since is not None
                                  and now - self._failing_since >= config.owner_grace_seconds):
            return
        if self._confirmed_at is not None \
                and self._confirmed_at + config.owner_renew_seconds > now:
            return
        for kind in self.kinds:
            if kind.sweeper is None:
                continue
            try:
                kind.sweeper.confirm()
            except Exception as exc:
                logger.warning("%s: owner confirmation not renewed: %s", kind.name, exc)
                return
        self._confirmed_at = now

    def _in_context(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        context = self.runtime.kopf_context
        if context is None:
            return call(*args, **kwargs)
        return context.copy().run(call, *args, **kwargs)

    def reconcile(self, kind: Kind, uid: str, *, trigger: str, digest: Hashable | None = None,
                  now: float | None = None, by_resync: bool = True) -> bool:
        """One pass of one cached object, its status patch sent, the answer cached, then
        the Events of the transitions that status records (kube/events.py); the one
        status writer of the operator (kopf's change handlers pass through here too).
        A queued kind's status is staged instead (the cache shows it at once) and sent
        by the kind's :class:`StatusWrites`, with its Events, without this pass waiting.
        ``digest`` (read before the pass) is recorded as what the pass started from
        (``by_resync``: by a time-driven pass, not the pass of a change). False when
        the pass or its status write failed (the change queue or kopf takes it again)."""
        cached = kind.cache.get(uid)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return True
        meta = cached.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        with kind.lock(cached):
            body = kind.cache.get(uid)  # a kopf handler may have written meanwhile
            if body is None:
                return True
            patch = kopf.Patch()
            try:
                _, held = self._in_context(
                    events.holding, handlers.counted, self.runtime, kind.name,
                    kind.reconciler.reconcile, body=as_body(body), patch=patch,
                    trigger=trigger)
            except kopf.TemporaryError as exc:
                logger.warning("%s %s/%s not reconciled: %s", kind.name, namespace, name, exc)
                return False
            except Exception:
                logger.exception("%s %s/%s: reconciliation failed", kind.name, namespace, name)
                return False
            status = dict(patch.get("status") or {})
            if kind.fingerprinter is not None:
                self.mark(kind, uid, digest, now if now is not None else time.monotonic(),
                          by_resync=by_resync)
            if set(patch) - {"status"}:
                logger.warning("%s %s/%s: only status is patched by the resync loop, not %s",
                               kind.name, namespace, name, sorted(set(patch) - {"status"}))
            if not status:
                self._in_context(events.post_held, held)
                return True
            writes = self.writes.get(kind.name)
            if writes is not None:  # sent by the kind's writers; the cache shows it now
                writes.stage(uid, namespace, name, status, held)
                return True
            try:
                updated = self.patch_status(kind, namespace, name, status)
            except Exception as exc:
                # Nothing of the transitions told: the next pass decides them again from
                # the status that is there, and tells them once its write succeeded.
                self.runtime.failed(kind.name)
                logger.warning("%s %s/%s: status not written: %s", kind.name, namespace, name,
                               exc)
                return False
            if updated is not None:
                # Under the object's lock: the next pass (kopf's handler's too) reads the
                # status just written, not the one this pass started from.
                kind.cache.put(updated)
                self._in_context(events.post_held, held)
        if updated is None:
            self.gone(kind, body)
        return True

    def patch_status(self, kind: Kind, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        return self.objects[kind.name].patch_status(namespace, name, status)

    def mark(self, kind: Kind, uid: str, digest: Hashable | None, now: float, *,
             by_resync: bool = True) -> None:
        """Record the digest a completed pass started from; a changed one keeps the
        object passed every interval for the fingerprinter's settle time (not after
        the pass of a change: its own row write -- a create -- changes the digest it
        read before, and that is no change to settle after)."""
        assert kind.fingerprinter is not None
        mark = kind.marks.get(uid)
        hot_until = mark.hot_until if mark is not None else 0.0
        if by_resync and mark is not None and mark.by_resync and mark.digest != digest:
            hot_until = now + kind.fingerprinter.settle_seconds
        kind.marks[uid] = Mark(digest=digest, hot_until=hot_until, by_resync=by_resync)

    def verify(self, kind: Kind) -> None:
        """List the kind: fresher bodies into the cache; what the cache holds and the
        listing lacks is confirmed with a GET, and a 404 is a deletion."""
        try:
            listed = self.objects[kind.name].list(self.runtime.config.namespaces,
                                                  page=LIST_PAGE)
        except Exception as exc:
            logger.warning("%s: cannot list it to verify the cache: %s", kind.name, exc)
            return
        self._listed[kind.name] = {_place(b) for b in listed}
        uids = set()
        for body in listed:
            uids.add(str((body.get("metadata") or {}).get("uid")))
            kind.cache.put(body)
        for uid in set(kind.cache.uids()) - uids:
            self.confirm_one(kind, uid)

    def confirm_one(self, kind: Kind, uid: str) -> None:
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

    def sweep(self) -> bool:
        """Every kind's sweep; False when one of them failed."""
        ok = True
        for kind in self.kinds:
            if kind.sweeper is None:
                continue
            present = set(kind.cache.project(_place).values()) \
                | self._listed.get(kind.name, set())
            objects = self.objects[kind.name]

            def exists(namespace: str, name: str, objects: CustomObjects = objects) -> bool:
                return objects.get(namespace, name) is not None

            try:
                kind.sweeper.sweep(present=present, exists=exists)
            except Exception as exc:
                ok = False
                logger.warning("%s: sweep failed (retried in %.0f s): %s", kind.name,
                               SWEEP_SECONDS, exc)
        return ok


def _started(digests: Mapping[str, Hashable | None], started: Mapping[str, Hashable],
             uid: str) -> Hashable | None:
    """The digest a batch's pass of ``uid`` starts from: the one its batch read after
    changing it (a row it created: no change for the resync loop to pass it again
    for), else the one read before the batch; None (passed every interval) stays None."""
    digest = digests.get(uid, UNSEEN)
    return started.get(uid, digest) if digest is not None else None


def _forget(queue: ChangeQueue, writes: StatusWrites, uid: str) -> None:
    """A queued kind's object is gone: neither passed nor written (again)."""
    queue.forget(uid)
    writes.forget(uid)


def _identity(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a fingerprinter reads of a cached body (a shallow copy: not the cache's)."""
    return {"metadata": dict(body.get("metadata") or {}), "spec": body.get("spec") or {},
            "status": body.get("status") or {}}


def _place(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def as_body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, raw))
