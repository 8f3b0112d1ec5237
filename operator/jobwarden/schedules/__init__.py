"""Recurring schedules: when slots fall (pure) and, later, the runner that enqueues them.

The pure part is importable without a database: :func:`parse` turns user input
into an :class:`Expression` that computes slots, and :func:`plan_due` decides
which slots to run after an outage. Everything here is re-exported so callers
write ``from jobwarden import schedules`` and ``schedules.parse(...)``.

The names resolve on first access (PEP 562), as the top package's do: importing
a submodule (a worker imports ``jobwarden.schedules.service``) runs this file
first, and it should not load the expression parser, the planner and cronsim for
a worker that has no schedule to plan (docs/benchmarks.md, "Idle worker RSS").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobwarden.schedules.errors import ScheduleError
    from jobwarden.schedules.expressions import (
        CronExpression,
        Expression,
        IntervalExpression,
        format_interval,
        parse,
        parse_interval,
        parse_stored,
    )
    from jobwarden.schedules.planning import (
        DEFAULT_COUNT_LIMIT,
        DEFAULT_TOLERANCE_SECONDS,
        MIN_WINDOW_SECONDS,
        CatchUp,
        DuePlan,
        plan_due,
        validate_catch_up,
    )

#: Where each public name lives (imported on first access).
_WHERE = {
    "ScheduleError": "jobwarden.schedules.errors",
    **dict.fromkeys(("CronExpression", "Expression", "IntervalExpression", "format_interval",
                     "parse", "parse_interval", "parse_stored"),
                    "jobwarden.schedules.expressions"),
    **dict.fromkeys(("DEFAULT_COUNT_LIMIT", "DEFAULT_TOLERANCE_SECONDS", "MIN_WINDOW_SECONDS",
                     "CatchUp", "DuePlan", "plan_due", "validate_catch_up"),
                    "jobwarden.schedules.planning"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobwarden.schedules' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_TOLERANCE_SECONDS",
    "MIN_WINDOW_SECONDS",
    "CatchUp",
    "CronExpression",
    "DuePlan",
    "Expression",
    "IntervalExpression",
    "ScheduleError",
    "format_interval",
    "parse",
    "parse_interval",
    "parse_stored",
    "plan_due",
    "validate_catch_up",
]
