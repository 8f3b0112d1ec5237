"""The kopf wiring every reconciled kind shares: a watch-fed cache, change handlers, deletion.

Why no kopf timer and no kopf finalizer: kopf puts its finalizer on every object
of a kind that has a timer (to stop the timer before the object goes) or a
delete handler. A finalizer only the operator can remove outlives the operator:
after ``helm uninstall`` (the operator's Deployment and RBAC go in the same
instant as the chart's WorkerPool) and on namespace deletion (the operator's
ServiceAccount, whose token the operator authenticates with, goes with the
namespace) every such object hung in Terminating. So:

* create/update/resume run a pass at once from kopf (no finalizer needed), with
  the status written by the resync loop's writer (``Kind.run_pass``),
  except for a ``queued`` kind (JobSchedule, ExclusiveJob): its watch events queue the changed
  objects for the operator's change queue (controller/changes.py says why);
* every watched object is kept in the kind's cache (kopf's indexing step feeds
  it, see :mod:`jobwarden.controller.kube.caching`; for the kinds registered
  with ``indexed=False``, the event handler does), and the operator-level resync
  loop (:mod:`jobwarden.controller.resyncing`) reconciles each cached object
  every ``interval`` seconds, or at once when nudged (a pool's pod changed):
  the time-driven work kopf timers did, with one loop for the whole operator;
* deletion is observed, not blocked: the watch's DELETED event runs the kind's
  deleter at once, and what a deletion while no operator ran left behind is
  swept by the resync loop (see docs/operator.md, "Deletion and finalizers").

Why the kinds that come by the thousand (JobSchedule, ExclusiveJob) are not
kopf-indexed: kopf holds every object's handlers until every indexed object has
been indexed, with one readiness toggle per object on one asyncio condition;
each object indexed wakes every object still waiting, so the initial listing
costs O(N^2) wake-ups (93 s for 3,100 objects, ~15 minutes at 10,000;
docs/benchmarks.md, "Operator at scale"). Their handlers need no complete cache
of their own kind (a pass reads its own object and the database), and the
resync loop's sweep works from its own listing, so their cache is fed by the
event handler instead. Pods and WorkerPools stay indexed: a pool's pass counts
its pods, and a half-filled pod cache would make it create pods again.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import kopf

from jobwarden.controller.kube import caching, resource_metrics
from jobwarden.controller.kube.kinds import (
    UNSEEN,
    Batcher,
    Deleter,
    Fingerprinter,
    Kind,
    Reconciler,
    Sweeper,
    change_of,
)
from jobwarden.controller.runtime import Runtime

logger = logging.getLogger("jobwarden.controller")


def counted(runtime: Runtime, kind: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``call``, counting any failure but a retry request as an operator error."""
    try:
        return call(*args, **kwargs)
    except kopf.TemporaryError:
        raise
    except Exception:
        runtime.failed(kind)
        raise


def register(registry: kopf.OperatorRegistry, runtime: Runtime, *, kind: str,
             resource: tuple[str, str, str], reconciler: Reconciler,
             deleter: Deleter | None = None, sweeper: Sweeper | None = None,
             interval: float | None = None, backoff: float = 5,
             change_id: str = "reconcile", indexed: bool = True,
             fingerprinter: Fingerprinter | None = None, queued: bool = False,
             batcher: Batcher | None = None) -> Kind:
    """Wire ``reconciler`` for ``resource`` and add the kind to the resync loop's.

    ``queued``: no kopf change handler; the watch events queue the changed objects
    for the operator's change queue (controller/changes.py says why); ``batcher``: the
    queue's batches of passes run inside its :meth:`~Batcher.batch`."""
    group, version, plural = resource
    watched = Kind(name=kind, resource=resource, reconciler=reconciler, deleter=deleter,
                   sweeper=sweeper, fingerprinter=fingerprinter, queued=queued,
                   batcher=batcher,
                   interval=runtime.config.status_interval if interval is None else interval)
    runtime.kinds.append(watched)

    def on_change(body: kopf.Body, reason: str, **_: Any) -> None:
        uid = str((body.get("metadata") or {}).get("uid"))
        # The digest before the pass reads anything: a change after it shows in the
        # resync loop's next digest, and the object is passed again then.
        digest = digest_of(fingerprinter, body) if fingerprinter is not None else None
        # The pass runs as every resync pass does (the newest cached body, under the
        # object's lock) and writes the status itself rather than through kopf's patch:
        # one writer, whose answer is cached before the next pass reads it, and which
        # posts a transition's Event only once the status recording it is written
        # (kube/events.py; issue 27: two writers told one transition twice).
        watched.cache.put(dict(body))  # a newer body or the status written since wins
        if not watched.run_pass(uid, trigger=str(reason), digest=digest):
            raise kopf.TemporaryError(f"{kind} not reconciled (the log says why)",
                                      delay=backoff)

    if not queued:
        for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
            decorator(group, version, plural, registry=registry, id=change_id,
                      backoff=backoff)(on_change)

    def cache_it(body: kopf.Body, **_: Any) -> None:
        # kopf's indexing step: before any handler, and before kopf's readiness.
        watched.cache.put(dict(body))
        resource_metrics.observe(kind, body)

    if indexed:
        kopf.index(group, version, plural, registry=registry, id=f"{plural}-cache")(cache_it)

    def on_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        seen(runtime)
        if type != "DELETED":
            if not indexed:
                cache_it(body)
            if queued:
                queue_change(watched, type, body)
            return
        meta = body.get("metadata", {})
        watched.cache.remove(str(meta.get("uid")))
        watched.marks.pop(str(meta.get("uid")), None)
        if queued:
            watched.submitted.pop(str(meta.get("uid")), None)
            watched.forget(str(meta.get("uid")))
        if deleter is not None:
            deleted(runtime, watched, body)
        # After the deleter: a gauge pass between the two would export the row's series again.
        resource_metrics.forget(kind, body)
        logger.debug("%s %s/%s deleted", kind, meta.get("namespace"), meta.get("name"))

    kopf.on.event(group, version, plural, registry=registry, id=f"{plural}-events")(on_event)
    return watched


def queue_change(kind: Kind, type: str | None, body: Mapping[str, Any]) -> None:
    """Queue a pass of the object when it is new to this operator or changed in what
    a pass reads (kinds.change_of); the watch's echo of a status write queues none."""
    uid = str((body.get("metadata") or {}).get("uid"))
    change = change_of(body)
    known = kind.submitted.get(uid)
    if known == change or uid not in kind.cache:
        return  # no change; or not cached (a late event of a deleted object)
    kind.submitted[uid] = change
    kind.submit(uid, "update" if known is not None
                else "create" if type == "ADDED" else "listed")


def watch_pods(registry: kopf.OperatorRegistry, runtime: Runtime, *, name: str,
               labels: dict[str, Any], cache: caching.ObjectCache,
               nudge: Callable[[Mapping[str, Any]], None],
               deleted: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Watch the pods the operator made (``labels``): keep them in ``cache``, wake their owner.

    The one pod watch of every kind that owns pods (worker pods, run pods): kopf's
    indexing step feeds the cache before any handler runs; a pod whose body changed
    nudges its owner (``nudge(body)``); a DELETED event drops it from the cache,
    hands it to ``deleted`` (a run pod is judged at once), then nudges its owner.
    """
    def cache_pod(body: kopf.Body, **_: Any) -> None:
        if cache.put(dict(body)):
            nudge(body)

    def on_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        seen(runtime)
        if type == "DELETED":
            cache.remove(str(body.get("metadata", {}).get("uid")))
            if deleted is not None:
                deleted(dict(body))
            nudge(body)

    kopf.index("", "v1", "pods", registry=registry, id=f"{name}-cache",
               labels=labels)(cache_pod)
    kopf.on.event("", "v1", "pods", registry=registry, id=f"{name}-events",
                  labels=labels)(on_pod_event)


def digest_of(fingerprinter: Fingerprinter, body: kopf.Body) -> Hashable | None:
    """The object's digest now; UNSEEN when it cannot be read (the resync loop then
    passes the object at its next interval, as it would without digests)."""
    uid = str((body.get("metadata") or {}).get("uid"))
    try:
        return fingerprinter.fingerprints([body]).get(uid, UNSEEN)
    except Exception as exc:
        logger.debug("no digest of %s: %s", uid, exc)
        return UNSEEN


def seen(runtime: Runtime) -> None:
    """A kopf event handler ran: every indexed kind is listed, and kopf's context is known."""
    if runtime.kopf.context is None:
        runtime.kopf.context = contextvars.copy_context()
    runtime.indexed.set()


def deleted(runtime: Runtime, kind: Kind, body: Any) -> None:
    """Clean what the object leaves behind (the deleter); a failure is logged and swept later."""
    assert kind.deleter is not None
    meta = body.get("metadata", {})
    try:
        with kind.lock(body):
            counted(runtime, kind.name, kind.deleter.delete, body=body)
    except Exception as exc:
        logger.warning("%s %s/%s deleted, but cleaning up after it failed (the resync loop's "
                       "sweep retries): %s", kind.name, meta.get("namespace"), meta.get("name"),
                       exc)
