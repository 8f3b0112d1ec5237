"""Counting slots: how many more attempts this process may claim right now."""

from __future__ import annotations

import threading


class Capacity:
    """A counter of free claim slots with a blocking wait.

    A slot is taken per claimed attempt and given back when the slot thread
    really finishes with it -- after a thread-isolated timeout that is when the
    thread returns, not when the timeout was recorded -- so the process never
    runs more than its concurrency.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._cond = threading.Condition()

    @property
    def free(self) -> int:
        with self._cond:
            return self._free

    def take(self, n: int) -> None:
        with self._cond:
            if n > self._free:
                raise RuntimeError(f"took {n} slots with only {self._free} free")
            self._free -= n

    def give(self, n: int = 1) -> None:
        with self._cond:
            self._free += n
            self._cond.notify_all()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self.size - self._free

    def wait_in_flight_below(self, limit: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.size - self._free < limit, timeout)

    def wait_all_free(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._free >= self.size, timeout)
