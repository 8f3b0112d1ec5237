"""Recurring schedules: when slots fall (pure) and, later, the runner that enqueues them.

The pure part is importable without a database: :func:`parse` turns user input
into an :class:`Expression` that computes slots, and :func:`plan_due` decides
which slots to run after an outage. Everything here is re-exported so callers
write ``from jobwarden import schedules`` and ``schedules.parse(...)``.
"""

from __future__ import annotations

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
