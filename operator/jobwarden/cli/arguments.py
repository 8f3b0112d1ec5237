"""Argument types every command shares: durations, counts, names.

Each is an ``argparse`` ``type=`` callable, so a bad value is refused while the
command line is parsed -- one line, exit 2, before anything touches the
database -- and the same rule holds for every flag that takes that kind of value.
"""

from __future__ import annotations

import argparse

from jobwarden import settings, textrules

echo = textrules.echo
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


def non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def port(text: str) -> int:
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def name(text: str) -> str:
    """A host, pool or queue name: not empty, not blank (blank never means "default")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty or blank")
    return text

