"""Per-resource series, read from the objects the operator watches: readiness, drain timeout.

Why from the watch and not from each reconciler: the watch event carries the
object as the API server stores it -- the status every ``kubectl get`` shows,
whoever wrote it -- and every kind passes through the same place
(:func:`jobwarden.controller.handlers.register`), so a kind cannot forget to
export its readiness, and a deleted object's series all go at its DELETED event
(:func:`jobwarden.observability.metrics.forget_resource`).

``jobwarden_resource_ready``: JobSchedule and ExclusiveJob have a ``Ready``
condition (1 True, 0 False, no series while Unknown or absent). A WorkerPool
has none; it is not ready (0) while a condition says it cannot progress --
``Progressing=False`` with ``InvalidSpec`` or ``ProgressDeadlineExceeded``,
``DSNSecretReady=False``, ``ReplicaFailure=True`` -- or while ``Available`` is
False, and ready (1) when ``Available`` is True. JobwardenResourceNotReady
fires on a 0 that lasts (docs/alerts.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobwarden.observability import metrics

__all__ = ["forget", "observe", "readiness"]

#: Progressing=False reasons that mean the pool cannot progress (a finished rollout is
#: Progressing=False too, with another reason).
STUCK_REASONS = frozenset({"InvalidSpec", "ProgressDeadlineExceeded"})


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = status.get("conditions") if isinstance(status, Mapping) else None
    items: Sequence[Any] = found if isinstance(found, list) else []
    return {str(c.get("type")): c for c in items if isinstance(c, Mapping)}


def readiness(kind: str, status: Mapping[str, Any] | None) -> float | None:
    """1 ready, 0 not ready, None unknown (see the module docstring)."""
    conditions = _conditions(status or {})
    ready = conditions.get("Ready")
    if kind != "WorkerPool" or ready is not None:
        state = (ready or {}).get("status")
        return 1.0 if state == "True" else 0.0 if state == "False" else None
    progressing = conditions.get("Progressing") or {}
    if ((progressing.get("status") == "False" and progressing.get("reason") in STUCK_REASONS)
            or (conditions.get("DSNSecretReady") or {}).get("status") == "False"
            or (conditions.get("ReplicaFailure") or {}).get("status") == "True"):
        return 0.0
    available = (conditions.get("Available") or {}).get("status")
    return 1.0 if available == "True" else 0.0 if available == "False" else None


def _identity(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def observe(kind: str, body: Mapping[str, Any]) -> None:
    """Set the object's series from its current body (every watch event)."""
    namespace, name = _identity(body)
    if not name:
        return
    value = readiness(kind, body.get("status"))
    if value is None:
        metrics.RESOURCE_READY.remove(kind, f"{namespace}/{name}")
    else:
        metrics.RESOURCE_READY.labels(kind, f"{namespace}/{name}").set(value)
    if kind == "WorkerPool":
        timeout = (body.get("spec") or {}).get("drainTimeoutSeconds")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            metrics.POOL_DRAIN_TIMEOUT.labels(name).set(float(timeout))


def forget(kind: str, body: Mapping[str, Any]) -> None:
    """The object was deleted: none of its series stay."""
    namespace, name = _identity(body)
    if name:
        metrics.forget_resource(kind, namespace, name)
