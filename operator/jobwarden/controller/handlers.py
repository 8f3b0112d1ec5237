"""The kopf wiring every reconciled kind shares: change, delete, and a periodic timer.

Why one place: each kind (JobSchedule, ExclusiveJob, WorkerPool) reconciles the
same way -- create/update/resume run the reconciler, a finalizer-backed delete
handler cleans up (where the kind has database rows to clean), and a timer
reconciles again periodically (mirroring the database into status, driving
rollouts) -- and each must count failures the same way. Only the reconciler and
the timings differ.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import kopf

from jobwarden.controller.runtime import Runtime

logger = logging.getLogger("jobwarden.controller")


class Reconciler(Protocol):
    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> object: ...


class Deleter(Protocol):
    def delete(self, *, body: kopf.Body) -> None: ...


def register(registry: kopf.OperatorRegistry, runtime: Runtime, *, kind: str,
             resource: tuple[str, str, str], reconciler: Reconciler,
             deleter: Deleter | None = None, interval: float | None = None,
             backoff: float = 5, change_id: str = "reconcile",
             timer_id: str = "mirror") -> None:
    """Wire ``reconciler`` for ``resource``; a ``deleter`` gets a finalizer-backed handler."""
    group, version, plural = resource
    every = runtime.config.status_interval if interval is None else interval

    def counted(call: Any, *args: Any, **kwargs: Any) -> None:
        try:
            call(*args, **kwargs)
        except kopf.TemporaryError:
            raise
        except Exception:
            runtime.failed(kind)
            raise

    def on_change(body: kopf.Body, patch: kopf.Patch, reason: str, **_: Any) -> None:
        counted(reconciler.reconcile, body=body, patch=patch, trigger=str(reason))

    def on_timer(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        # The timer runs again at the next interval: log, count, never raise.
        meta = body.get("metadata", {})
        try:
            counted(reconciler.reconcile, body=body, patch=patch, trigger="timer")
        except kopf.TemporaryError as exc:
            logger.warning("%s %s/%s not reconciled: %s", kind, meta.get("namespace"),
                           meta.get("name"), exc)
        except Exception:
            logger.exception("%s %s/%s: reconciliation failed", kind, meta.get("namespace"),
                             meta.get("name"))

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(group, version, plural, registry=registry, id=change_id,
                  backoff=backoff)(on_change)
    if deleter is not None:
        def on_delete(body: kopf.Body, **_: Any) -> None:
            counted(deleter.delete, body=body)

        kopf.on.delete(group, version, plural, registry=registry, id="cleanup",
                       backoff=backoff)(on_delete)
    kopf.timer(group, version, plural, registry=registry, id=timer_id,
               interval=every, initial_delay=every)(on_timer)
