"""The worker's named threads, and what happens when one dies.

A critical thread (fetch, listen, slots, recorder, heartbeat, maintain) that
dies unexpectedly stops the process loudly (exit code 70) rather than leaving a
half-alive worker that claims jobs it will never finish (the listen thread
claims too: see ``claiming.py``); a non-critical one is logged and the worker
carries on.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable

logger = logging.getLogger("jobwarden.worker")


class Threads:
    """Starts a worker's threads and remembers the first critical crash.

    ``on_crash`` is called from the dying thread (the worker stops at once).
    """

    def __init__(self, on_crash: Callable[[], None]) -> None:
        self._on_crash = on_crash
        self._threads: list[threading.Thread] = []
        #: Why a critical thread died (None while all is well).
        self.crash: str | None = None

    def spawn(self, name: str, target: Callable[[], None], *, critical: bool = True) -> None:
        """Start ``target`` as daemon thread ``jobwarden-<name>``."""
        def main() -> None:
            try:
                target()
            except BaseException as exc:
                if critical:
                    self.crash = f"thread {name} died: {type(exc).__name__}: {exc}"
                    logger.critical("%s\n%s", self.crash, traceback.format_exc())
                    self._on_crash()
                else:
                    logger.exception("thread %s died", name)

        thread = threading.Thread(target=main, name=f"jobwarden-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def join(self, name: str, timeout: float) -> None:
        """Wait up to ``timeout`` for thread ``jobwarden-<name>`` to end."""
        for thread in self._threads:
            if thread.name == f"jobwarden-{name}":
                thread.join(timeout=timeout)
