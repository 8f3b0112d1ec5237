"""Argument types every command shares: durations, counts, names.

Each is an ``argparse`` ``type=`` callable, so a bad value is refused while the
command line is parsed -- one line, exit 2, before anything touches the
database -- and the same rule holds for every flag that takes that kind of value.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from jobwarden import settings, textrules

echo = textrules.echo


class UsageError(ValueError):
    """Flags that parse one by one but not together (``--since`` after ``--until``):
    a usage error like any bad flag (exit 2), found once the command runs."""
#: The one duration rule (flags and ``JOBWARDEN_*`` durations alike).
parse_duration = settings.parse_duration


def duration(text: str) -> float:
    """A non-negative duration (0 allowed: "off" or "no wait" where a flag says so)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_duration(text: str) -> float:
    value = duration(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {echo(text)}")
    return value


def whole_number(text: str) -> int:
    """``int(text)``, with an error message that does not echo long input."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {echo(text)}") from None


def _integer(text: str) -> int:
    try:
        return whole_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The largest count, limit, slot or size a flag takes: PostgreSQL's integer. A larger
#: one was a database error (a traceback) or a worker thread's crash, not a usage error.
MAX_COUNT = 2**31 - 1


def non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, not {echo(text)}")
    return value


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, not {echo(text)}")
    return value


def int_between(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high`` (``jobs list --limit``: 1 to 1000)."""
    def parse(text: str) -> int:
        value = _integer(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value
    return parse


#: Job ids are bigint: a larger number was a database error, not a usage error.
job_id = int_between(1, 2**63 - 1)
#: A lease's fencing token is bigint too.
fencing_token = int_between(1, 2**63 - 1)


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """A duration from ``low`` to ``high`` seconds (``top --interval``: 0.2 to 3600)."""
    def parse(text: str) -> float:
        value = duration(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be from {low:g} to {high:g} seconds, not {echo(text)}")
        return value
    return parse


def port(text: str) -> int:
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def non_empty(text: str) -> str:
    """Any text but the empty string (``queues resume`` takes a blank 0.1.0 stored)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def name(text: str) -> str:
    """A host, pool or queue name: not empty, not blank (blank never means "default")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty or blank")
    return text

