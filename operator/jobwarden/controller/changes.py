"""The change queue of a kind whose changes are not kopf's: passes in batches, writes bounded.

Why (JobSchedule and ExclusiveJob, the kinds that come by the thousand):
through kopf's change handlers every new object cost two PATCHes -- kopf's
``last-handled-configuration`` annotation, then the status -- besides the
Events, and kopf sends them from one task per object with no bound but
aiohttp's connection limit. At a start with 10,000 JobSchedules the API server
answered thousands of them with 504s and kopf retried each with its backoff;
the rows trickled in for 12 minutes (docs/benchmarks.md, "Operator at scale").

So the kind's watch events (kopf's, still: one LIST, then a WATCH from its
resourceVersion, reconnects and peering as kopf does them) only feed the cache
and tell this queue which objects changed (new, or a new generation,
annotations or labels; a status-only event -- this operator's own write -- is
none). :data:`PASSERS` threads take the pending objects :data:`BATCH` at a time
and pass each of them (the resync loop's pass: the row written, the status
staged for the kind's own writers, statuswrites.py, which send one status
PATCH per object with at most a few in flight; Events through kopf's poster);
no annotation is written, no pass waits for the API server, and the digests a
batch's passes start from are read with one query. A pass that failed (the
database unavailable) is taken again after :data:`RETRY_SECONDS`, as kopf's
handler backoff did.

The queue holds uids, each once: an object that changes again while pending is
passed once, from the newest body in the cache.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence

logger = logging.getLogger("jobwarden.controller.changes")

#: Threads passing changed objects.
PASSERS = 4
#: Objects a writer takes at once (their digests are read with one query).
BATCH = 64
#: A failed pass is taken again after this many seconds.
RETRY_SECONDS = 5.0

#: ``process(batch)`` passes ``[(uid, trigger), ...]`` and returns those that failed.
Process = Callable[[Sequence[tuple[str, str]]], Sequence[str]]


class ChangeQueue:
    """Pending objects by uid (first in, first out; each once), passed by writer threads."""

    def __init__(self, name: str, process: Process, *, writers: int = PASSERS,
                 batch: int = BATCH, retry_seconds: float = RETRY_SECONDS,
                 paused: Callable[[], bool] = lambda: False) -> None:
        self.name = name
        self.process = process
        self.writers = writers
        self.batch = batch
        self.retry_seconds = retry_seconds
        self.paused = paused
        self._wake = threading.Condition()
        #: uid -> trigger, in the order first submitted.
        self._pending: collections.OrderedDict[str, str] = collections.OrderedDict()
        #: uid -> (when it may be passed again, trigger): failed passes.
        self._retry: dict[str, tuple[float, str]] = {}
        #: Taken by a writer and not done: a submit meanwhile is passed after it.
        self._busy: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def submit(self, uid: str, trigger: str) -> None:
        with self._wake:
            self._retry.pop(uid, None)
            self._pending.setdefault(uid, trigger)
            self._wake.notify()

    def forget(self, uid: str) -> None:
        """The object is gone: not passed (again)."""
        with self._wake:
            self._pending.pop(uid, None)
            self._retry.pop(uid, None)

    def pending(self) -> int:
        with self._wake:
            return len(self._pending) + len(self._retry) + len(self._busy)

    def holding(self) -> frozenset[str]:
        """The uids this queue will pass or is passing (pending, waiting for a retry,
        taken by a writer): the resync loop leaves those to it (resyncing.py)."""
        with self._wake:
            return frozenset(self._pending).union(self._retry, self._busy)

    # -- the writers --------------------------------------------------------------------------

    def start(self) -> None:
        for index in range(self.writers):
            thread = threading.Thread(target=self._run, daemon=True,
                                      name=f"jobwarden-{self.name.lower()}-writer-{index}")
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def take(self) -> list[tuple[str, str]]:
        """Up to ``batch`` pending objects no other writer holds (due retries first
        joined to the pending ones); [] when there are none (waits a while first)."""
        with self._wake:
            now = time.monotonic()
            for uid, (due, trigger) in list(self._retry.items()):
                if due <= now:
                    del self._retry[uid]
                    self._pending.setdefault(uid, trigger)
            if self.paused():  # kopf's peering paused this replica: the peer passes them
                self._wake.wait(0.5)
                return []
            if not self._ready() and not self._stop.is_set():
                waits = [due - now for due, _ in self._retry.values()]
                self._wake.wait(max(0.01, min([*waits, 1.0])))
            taken: list[tuple[str, str]] = []
            for uid in list(self._pending):
                if uid in self._busy:
                    continue
                taken.append((uid, self._pending.pop(uid)))
                self._busy.add(uid)
                if len(taken) >= self.batch:
                    break
            return taken

    def _ready(self) -> bool:
        return any(uid not in self._busy for uid in self._pending)

    def done(self, taken: Sequence[tuple[str, str]], failed: Sequence[str]) -> None:
        again = set(failed)
        with self._wake:
            for uid, trigger in taken:
                self._busy.discard(uid)
                if uid in again and uid not in self._pending:
                    self._retry[uid] = (time.monotonic() + self.retry_seconds, trigger)
            self._wake.notify_all()

    def run_once(self) -> int:
        """Take one batch and pass it; the number of objects taken."""
        taken = self.take()
        if not taken:
            return 0
        failed: Sequence[str] = [uid for uid, _ in taken]
        try:
            failed = self.process(taken)
        except Exception:  # never lose a writer; the batch is taken again
            logger.exception("%s: passing %d changed object(s) failed", self.name, len(taken))
        finally:
            self.done(taken, failed)
        return len(taken)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
