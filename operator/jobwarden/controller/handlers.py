"""The kopf wiring every reconciled kind shares: change, delete, and a status timer.

Why one place: each kind (JobSchedule, ExclusiveJob) reconciles the same way --
create/update/resume run the reconciler, a finalizer-backed delete handler
cleans up, and a timer mirrors the database into status -- and each must count
failures the same way. Only the reconciler differs.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import kopf

from jobwarden.controller.runtime import Runtime

logger = logging.getLogger("jobwarden.controller")


class Reconciler(Protocol):
    def reconcile(self, *, body: kopf.Body, patch: kopf.Patch, trigger: str) -> object: ...

    def delete(self, *, body: kopf.Body) -> None: ...


def register(registry: kopf.OperatorRegistry, runtime: Runtime, *, kind: str,
             resource: tuple[str, str, str], reconciler: Reconciler) -> None:
    group, version, plural = resource

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
        try:
            counted(reconciler.reconcile, body=body, patch=patch, trigger="timer")
        except kopf.TemporaryError as exc:
            meta = body.get("metadata", {})
            logger.warning("status of %s/%s not refreshed: %s", meta.get("namespace"),
                           meta.get("name"), exc)

    def on_delete(body: kopf.Body, **_: Any) -> None:
        counted(reconciler.delete, body=body)

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(group, version, plural, registry=registry, id="reconcile",
                  backoff=5)(on_change)
    kopf.on.delete(group, version, plural, registry=registry, id="cleanup",
                   backoff=5)(on_delete)
    kopf.timer(group, version, plural, registry=registry, id="mirror",
               interval=runtime.config.status_interval,
               initial_delay=runtime.config.status_interval)(on_timer)
