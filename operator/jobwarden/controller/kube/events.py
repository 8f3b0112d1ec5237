"""Posting Kubernetes Events: through kopf (its queue, its batching), or directly.

kopf's own INFO-level object logs are not posted (``settings.posting.level`` is
WARNING, see app.py): the Events a user sees with ``kubectl describe`` are the
transitions the status module decided are worth one, plus kopf's warnings and
errors.

kopf posts only from its handlers' context; the pod watch of pod runs judges a
pod's end outside it, so :func:`post_direct` creates the core/v1 Event itself,
in the shape kopf gives its own (:func:`event_body`, pure).

Two kinds of Events come out of a pass. What the pass *did* (created a pod,
started a drain) is posted at once with :func:`post`. A *transition* the pass
decided by comparing the status it read with the one it wants (a condition
turned False, a rollout started) is told with :func:`post_with_status`: the
writer of the status (:meth:`jobwarden.controller.resyncing.Resync.reconcile`,
for kopf's change handlers too) holds it and posts it only once the status
patch that records the transition was written. So a pass whose write failed
tells nothing, the next pass (reading the status that is there) decides the
transition again, and only the pass whose write succeeded tells it: one Event
per transition (issue 27: ``RolloutStarted`` and ``ProgressDeadlineExceeded``
twice under load).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Any

import kopf

from jobwarden.controller.kube import status as st
from jobwarden.controller.kube.client import CoreCalls

#: Kubernetes caps an Event message at 1 KiB in practice (kubectl shows less).
MAX_MESSAGE = 1024
#: The source component of the Events the operator posts itself (kopf's reporting one).
COMPONENT = "jobwarden-operator"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Involved:
    """The object an Event is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


logger = logging.getLogger("jobwarden.controller.events")

#: The transitions held by the status writer of the pass running in this context.
_HELD: contextvars.ContextVar[list[tuple[kopf.Body, st.Event]] | None] = \
    contextvars.ContextVar("jobwarden_held_events", default=None)


def post(body: kopf.Body, events: Iterable[st.Event]) -> None:
    for event in events:
        try:
            kopf.event(body, type=event.type, reason=event.reason,
                       message=event.message[:MAX_MESSAGE])
        except LookupError:  # outside kopf's context: before its first handler ran
            logger.info("event not posted (kopf not started): %s %s", event.reason,
                        event.message)


def post_with_status(body: kopf.Body, events: Iterable[st.Event]) -> None:
    """Transitions the status being written records: held by the status writer until
    its write succeeded (posted at once where no writer holds them)."""
    held = _HELD.get()
    if held is None:
        post(body, events)
        return
    held.extend((body, event) for event in events)


def holding(call: Callable[..., Any], *args: Any, **kwargs: Any
            ) -> tuple[Any, list[tuple[kopf.Body, st.Event]]]:
    """``call(*args, **kwargs)`` with the transitions it tells held: (its result, them)."""
    held: list[tuple[kopf.Body, st.Event]] = []
    token = _HELD.set(held)
    try:
        return call(*args, **kwargs), held
    finally:
        _HELD.reset(token)


def post_held(held: Iterable[tuple[kopf.Body, st.Event]]) -> None:
    """Post what :func:`holding` held (the status recording them was written)."""
    for body, event in held:
        post(body, [event])


def event_body(involved: Involved, event: st.Event, *, now: dt.datetime) -> dict[str, Any]:
    """The core/v1 Event about ``involved`` (pure)."""
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{involved.name[:200]}.",
                     "namespace": involved.namespace},
        "involvedObject": {"apiVersion": involved.api_version, "kind": involved.kind,
                           "name": involved.name, "namespace": involved.namespace,
                           "uid": involved.uid},
        "type": event.type, "reason": event.reason, "message": event.message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


def post_direct(core: CoreCalls, involved: Involved, event: st.Event) -> None:
    """Create the Event with the operator's client (``core``), outside kopf."""
    core.call("POST", involved.namespace, "events",
              body=event_body(involved, event, now=dt.datetime.now(dt.UTC)))
