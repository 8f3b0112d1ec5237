"""Decide, for one schedule and one "now", which slots run and how many were missed.

This is the pure half of the schedule runner: the runner reads a schedule row
and the database clock, calls :func:`plan_due`, enqueues ``plan.run`` (one job
per slot, unique key ``<name>:<slot>``), adds ``plan.missed`` to the missed
counter and advances the row's cursor to ``plan.cursor``. Keeping the decision
free of I/O lets the catch-up rules be tested exhaustively with an injected
"now" instead of by sleeping through outages.

The rules (DESIGN section 6):

* Slots at or before ``last_slot`` never run again; only ``(last_slot, now]``
  is considered, and every slot in it gets a fate: run, or missed.
* A new schedule (``last_slot is None``) starts from now: nothing before
  ``now`` is its history, so nothing is run or missed, except that a slot
  exactly at ``now`` runs.
* ``latest``: the most recent slot runs if ``now - slot <= window``.
* ``none``: the most recent slot runs only if it is current, i.e.
  ``now - slot <= tolerance`` (the runner's check period with some slack).
* ``all``: every slot with ``now - slot <= window`` runs, but at most
  ``catch_up_max`` of them (the most recent ones).

Work is bounded after long outages: intervals count missed slots by
arithmetic; cron slots are walked newest-first and the walk stops after
``count_limit`` slots, in which case ``missed`` is a lower bound and
``missed_exact`` is False (years of minutely slots cost milliseconds, not
seconds, per schedule).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from typing import get_args

from jobwarden.schedules import errors, expressions
from jobwarden.structs.policies import CatchUp

__all__ = [
    "DEFAULT_COUNT_LIMIT",
    "DEFAULT_TOLERANCE_SECONDS",
    "MIN_WINDOW_SECONDS",
    "CatchUp",
    "DuePlan",
    "plan_due",
    "validate_catch_up",
]

#: The smallest catch-up window a schedule may have (DESIGN section 6).
MIN_WINDOW_SECONDS = 60
#: How old the newest slot may be and still count as "current" under ``none``.
DEFAULT_TOLERANCE_SECONDS = 60
#: How many cron slots one plan enumerates at most before it stops counting.
DEFAULT_COUNT_LIMIT = 1_000


@dataclasses.dataclass(frozen=True)
class DuePlan:
    """The fate of every slot in ``(last_slot, now]``.

    ``run`` is ascending. Unless ``missed_exact`` is False (a very long cron
    outage cut short by ``count_limit``), ``len(run) + missed`` is the number
    of slots in ``(last_slot, now]``. ``cursor`` is what to store as the
    schedule's ``last_slot`` once ``run`` is enqueued: every slot at or before
    it has its fate. ``next_slot`` is the first slot after ``cursor``.
    """

    run: list[dt.datetime]
    missed: int
    next_slot: dt.datetime
    cursor: dt.datetime
    missed_exact: bool = True


def plan_due(
    expr: expressions.Expression,
    *,
    last_slot: dt.datetime | None,
    now: dt.datetime,
    catch_up: CatchUp = "latest",
    window_seconds: int = 3600,
    catch_up_max: int = 1,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    count_limit: int = DEFAULT_COUNT_LIMIT,
    max_catch_up: int | None = None,
) -> DuePlan:
    """Plan which slots of ``expr`` to enqueue at ``now`` given the last slot that had a fate.

    ``max_catch_up`` is 0.1.0's name of ``catch_up_max`` (the schedule's own name
    everywhere else), still accepted.
    """
    if max_catch_up is not None:
        catch_up_max = max_catch_up
    validate_catch_up(catch_up=catch_up, window_seconds=window_seconds, catch_up_max=catch_up_max)
    if tolerance_seconds < 0:
        raise errors.ScheduleError(f"tolerance must not be negative, got {tolerance_seconds}s")
    if count_limit < 1:
        raise errors.ScheduleError(f"count limit must be at least 1, got {count_limit}")
    now = _aware(now).astimezone(dt.UTC)

    if last_slot is None:
        return DuePlan(
            run=[now] if expr.matches(now) else [],
            missed=0,
            next_slot=expr.next_after(now),
            cursor=now,
        )

    last_slot = _aware(last_slot).astimezone(dt.UTC)
    if now <= last_slot:
        return DuePlan(run=[], missed=0, next_slot=expr.next_after(last_slot), cursor=last_slot)

    if catch_up == "latest":
        runnable, limit = window_seconds, 1
    elif catch_up == "none":
        runnable, limit = tolerance_seconds, 1
    else:
        runnable, limit = window_seconds, catch_up_max
    oldest_runnable = now - dt.timedelta(seconds=runnable)

    run: list[dt.datetime] = []
    seen = 0
    exact = True
    newest_first = expr.iter_before(now)
    for slot in itertools.takewhile(lambda s: s > last_slot, newest_first):
        if len(run) < limit and slot >= oldest_runnable:
            run.append(slot)
            seen += 1
            continue
        if isinstance(expr, expressions.IntervalExpression):
            # Everything older is missed: count it by arithmetic, however long the outage.
            seen += 1 + expr.count_between(last_slot, slot - dt.timedelta(microseconds=1))
            break
        seen += 1
        if seen >= count_limit:
            exact = next(newest_first, last_slot) <= last_slot
            break
    run.reverse()
    return DuePlan(
        run=run,
        missed=seen - len(run),
        next_slot=expr.next_after(now),
        cursor=now,
        missed_exact=exact,
    )


def validate_catch_up(*, catch_up: str, window_seconds: int, catch_up_max: int | None = None,
                      max_catch_up: int | None = None) -> None:
    """Refuse catch-up settings that cannot be honoured (also for the schedule store).

    ``max_catch_up``: 0.1.0's name of ``catch_up_max``, still accepted.
    """
    if catch_up_max is None:
        if max_catch_up is None:
            raise TypeError("validate_catch_up() needs catch_up_max")
        catch_up_max = max_catch_up
    if catch_up not in get_args(CatchUp):
        allowed = ", ".join(repr(mode) for mode in get_args(CatchUp))
        raise errors.ScheduleError(f"catch-up must be one of {allowed}, got {catch_up!r}")
    if window_seconds < MIN_WINDOW_SECONDS:
        raise errors.ScheduleError(
            f"catch-up window must be at least {MIN_WINDOW_SECONDS}s, got {window_seconds}s"
        )
    if catch_up_max < 1:
        raise errors.ScheduleError(f"max catch-up must be at least 1, got {catch_up_max}")


def _aware(t: dt.datetime) -> dt.datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"naive datetime {t!r}: schedule times must be timezone-aware")
    return t
