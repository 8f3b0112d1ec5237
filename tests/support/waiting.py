"""Waiting for a state with a deadline, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: The default bound: a hang bound, not a speed claim. The suite must hold on a machine
#: several times slower than a developer's (the CI once ran it 3.7x slower), so a wait
#: that takes 3 s here must not fail there; only a hang runs into it.
TIMEOUT_SECONDS = 60.0


def wait_for(predicate: Callable[[], T], *, timeout: float = TIMEOUT_SECONDS,
             interval: float = 0.02, message: str = "condition",
             check: Callable[[], None] | None = None,
             context: Callable[[], str] | None = None) -> T:
    """``predicate()`` once truthy, polled every ``interval``; AssertionError at the deadline.

    ``check`` runs each round and raises to fail early (a kubelet that already
    failed); ``context`` adds what helps to read a timeout (logs) to its message.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f"\n{context()}" if context is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; "
                                 f"last value {value!r}{extra}")
        if check is not None:
            check()
        time.sleep(interval)
