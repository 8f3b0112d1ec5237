"""Status machinery every kind shares: conditions, status patches, Events; pure.

The handlers read rows, call these functions and write what they return; no
function here does I/O, so every decision (when a condition's
``lastTransitionTime`` moves, which transition is worth an Event, whether a
status patch is needed at all) is unit-tested without a cluster or a database
(tests/operator/test_status.py). What each kind's status says lives beside
it: ``schedule_status.py`` (JobSchedule), ``exclusive_status.py``
(ExclusiveJob); a WorkerPool's status is built by its reconciler
(``pools.py``) from these same parts.

Why patches are computed as a delta against the current status: the status
mirror runs every few seconds for every resource, and writing an unchanged
status still bumps ``resourceVersion`` and wakes every watcher. A mirror pass
that finds nothing new must send nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

ConditionStatus = Literal["True", "False", "Unknown"]

def timestamp(value: dt.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as Kubernetes writes times (whole seconds)."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}")
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- conditions ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


def condition_of(conditions: Iterable[Mapping[str, Any]] | None,
                 kind: str) -> Mapping[str, Any] | None:
    for item in conditions or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def set_conditions(previous: Sequence[Mapping[str, Any]] | None, updates: Iterable[Condition],
                   *, generation: int | None, now: dt.datetime) -> list[dict[str, Any]]:
    """The new conditions list: ``updates`` applied over ``previous``.

    ``lastTransitionTime`` moves only when a condition's status changes (the
    Kubernetes convention: it says since when the status holds, not when we last
    looked). Conditions not in ``updates`` are kept as they were. Order is stable:
    existing types first, new ones appended.
    """
    out: list[dict[str, Any]] = [dict(c) for c in previous or () if isinstance(c, Mapping)]
    for update in updates:
        entry: dict[str, Any] = {"type": update.type, "status": update.status,
                                 "reason": update.reason, "message": update.message}
        if generation is not None:
            entry["observedGeneration"] = generation
        for index, old in enumerate(out):
            if old.get("type") == update.type:
                same = old.get("status") == update.status and old.get("lastTransitionTime")
                entry["lastTransitionTime"] = old["lastTransitionTime"] if same \
                    else timestamp(now)
                out[index] = entry
                break
        else:
            entry["lastTransitionTime"] = timestamp(now)
            out.append(entry)
    return out


def same_conditions(a: Sequence[Mapping[str, Any]] | None,
                     b: Sequence[Mapping[str, Any]] | None) -> bool:
    return [dict(c) for c in a or ()] == [dict(c) for c in b or ()]


# -- patches ------------------------------------------------------------------------------


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any],
                 managed: Sequence[str]) -> dict[str, Any]:
    """A JSON merge patch for ``.status``: only the managed keys that differ.

    A managed key present now but absent from ``desired`` is removed (None).
    An empty result means: send nothing.
    """
    now = dict(current or {})
    patch: dict[str, Any] = {}
    for key in managed:
        if key in desired:
            if key == "conditions":
                if not same_conditions(now.get(key), desired[key]):
                    patch[key] = desired[key]
            elif now.get(key) != desired[key]:
                patch[key] = desired[key]
        elif now.get(key) is not None:
            patch[key] = None
    return patch


def kept_status(previous: Mapping[str, Any] | None, managed: Sequence[str], *,
                generation: int | None, conditions: Iterable[Condition],
                now: dt.datetime) -> dict[str, Any]:
    """The start of a kind's desired status: its managed keys as they are, the
    generation observed (when known) and the conditions updated."""
    before = dict(previous or {})
    out: dict[str, Any] = {k: before[k] for k in managed if k in before}
    if generation is not None:
        out["observedGeneration"] = generation
    out["conditions"] = set_conditions(before.get("conditions"), conditions,
                                       generation=generation, now=now)
    return out


# -- events -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def condition_events(previous: Sequence[Mapping[str, Any]] | None,
                     current: Sequence[Mapping[str, Any]]) -> list[Event]:
    """Events for the transitions between two condition lists worth telling a human."""
    events: list[Event] = []

    def changed(kind: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        return condition_of(previous, kind), condition_of(current, kind)

    old, new = changed("Ready")
    if new is not None and new.get("reason") == "InvalidSpec" and (
            old is None or old.get("reason") != "InvalidSpec"
            or old.get("message") != new.get("message")):
        events.append(Event(type="Warning", reason="InvalidSpec",
                            message=str(new.get("message", ""))))
    old, new = changed("Conflicting")
    was = old is not None and old.get("status") == "True"
    now = new is not None and new.get("status") == "True"
    if now and not was:
        events.append(Event(type="Warning", reason="SpecConflict",
                            message=str(new.get("message", "")) if new else ""))
    elif was and new is not None and not now:
        events.append(Event(type="Normal", reason="ConflictResolved",
                            message="the spec now matches the schedule row"))
    old, new = changed("Suspended")
    was = old is not None and old.get("status") == "True"
    now = new is not None and new.get("status") == "True"
    if now and not was:
        events.append(Event(type="Normal", reason="Suspended",
                            message="schedule suspended: no new slots are enqueued"))
    elif was and new is not None and not now:
        events.append(Event(type="Normal", reason="Resumed", message="schedule resumed"))
    old, new = changed("LeaseLost")
    if new is not None and new.get("status") == "True" and (
            old is None or old.get("status") != "True"):
        events.append(Event(type="Warning", reason="LeaseLost",
                            message=str(new.get("message", ""))))
    return events
