"""Posting Kubernetes Events through kopf (its queue, its batching, its RBAC needs).

kopf's own INFO-level object logs are not posted (``settings.posting.level`` is
WARNING, see app.py): the Events a user sees with ``kubectl describe`` are the
transitions the status module decided are worth one, plus kopf's warnings and
errors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import kopf

from jobwarden.controller import status as st

#: Kubernetes caps an Event message at 1 KiB in practice (kubectl shows less).
MAX_MESSAGE = 1024


logger = logging.getLogger("jobwarden.controller.events")


def post(body: kopf.Body, events: Iterable[st.Event]) -> None:
    for event in events:
        try:
            kopf.event(body, type=event.type, reason=event.reason,
                       message=event.message[:MAX_MESSAGE])
        except LookupError:  # outside kopf's context: before its first handler ran
            logger.info("event not posted (kopf not started): %s %s", event.reason,
                        event.message)
