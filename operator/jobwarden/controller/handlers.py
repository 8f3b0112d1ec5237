"""The kopf wiring every reconciled kind shares: a watch-fed cache, change handlers, deletion.

Why no kopf timer and no kopf finalizer: kopf puts its finalizer on every object
of a kind that has a timer (to stop the timer before the object goes) or a
delete handler. A finalizer only the operator can remove outlives the operator:
after ``helm uninstall`` (the operator's Deployment and RBAC go in the same
instant as the chart's WorkerPool) and on namespace deletion (the operator's
ServiceAccount, whose token the operator authenticates with, goes with the
namespace) every such object hung in Terminating. So:

* create/update/resume run the reconciler through kopf (no finalizer needed);
* every watched object is kept in the kind's cache (kopf's indexing step feeds
  it, see :mod:`jobwarden.controller.caching`), and the operator-level resync
  loop (:mod:`jobwarden.controller.resyncing`) reconciles each cached object
  every ``interval`` seconds, or at once when nudged (a pool's pod changed):
  the time-driven work kopf timers did, with one loop for the whole operator;
* deletion is observed, not blocked: the watch's DELETED event runs the kind's
  deleter at once, and what a deletion while no operator ran left behind is
  swept by the resync loop (see docs/operator.md, "Deletion and finalizers").
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import kopf

from jobwarden.controller.kinds import Deleter, Kind, Reconciler, Sweeper
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
             change_id: str = "reconcile") -> Kind:
    """Wire ``reconciler`` for ``resource`` and add the kind to the resync loop's."""
    group, version, plural = resource
    watched = Kind(name=kind, resource=resource, reconciler=reconciler, deleter=deleter,
                   sweeper=sweeper,
                   interval=runtime.config.status_interval if interval is None else interval)
    runtime.kinds.append(watched)

    def on_change(body: kopf.Body, patch: kopf.Patch, reason: str, **_: Any) -> None:
        with watched.lock(body):
            counted(runtime, kind, reconciler.reconcile, body=body, patch=patch,
                    trigger=str(reason))

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(group, version, plural, registry=registry, id=change_id,
                  backoff=backoff)(on_change)

    def cache_it(body: kopf.Body, **_: Any) -> None:
        # kopf's indexing step: before any handler, and before kopf's readiness.
        watched.cache.put(dict(body))

    kopf.index(group, version, plural, registry=registry, id=f"{plural}-cache")(cache_it)

    def on_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        seen(runtime)
        if type != "DELETED":
            return
        meta = body.get("metadata", {})
        watched.cache.remove(str(meta.get("uid")))
        if deleter is not None:
            deleted(runtime, watched, body)
        logger.debug("%s %s/%s deleted", kind, meta.get("namespace"), meta.get("name"))

    kopf.on.event(group, version, plural, registry=registry, id=f"{plural}-events")(on_event)
    return watched


def seen(runtime: Runtime) -> None:
    """A kopf event handler ran: every indexed kind is listed, and kopf's context is known."""
    if runtime.kopf_context is None:
        runtime.kopf_context = contextvars.copy_context()
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
