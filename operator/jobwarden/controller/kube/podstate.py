"""Reading a Pod object's state: container statuses and the API server's timestamps; pure.

Why one module: the WorkerPool's health check (is a container crash-looping?)
and a pod run's fate (did the pod start, how did it end?) read the same fields
of the same objects, and a pool's rollout and a pod run's history read the same
timestamps; two readers had drifted apart in what they tolerate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any


def container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The init containers' statuses, then the containers' (malformed entries skipped)."""
    status = pod.get("status") or {}
    return [s for s in [*(status.get("initContainerStatuses") or []),
                        *(status.get("containerStatuses") or [])] if isinstance(s, Mapping)]


def parse_time(raw: Any) -> dt.datetime | None:
    """An API timestamp (``2026-01-01T00:00:00Z``) or a datetime; None if it is neither.

    A datetime without a zone is taken as UTC (the API server speaks UTC).
    """
    if isinstance(raw, dt.datetime):
        return raw if raw.tzinfo else raw.replace(tzinfo=dt.UTC)
    if isinstance(raw, str) and raw:
        try:
            return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def epoch(raw: Any) -> float | None:
    """:func:`parse_time` as epoch seconds."""
    parsed = parse_time(raw)
    return None if parsed is None else parsed.timestamp()
