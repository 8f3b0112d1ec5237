"""The plug-in interface every benchmarked job system implements.

The harness never imports a job library itself: it talks to one adapter module
per system (``bench/adapters/<name>_adapter.py``) through the small surface
below, so adding a system is one module and the comparison stays honest: the
harness owns the clock, the payloads, the counting and the statistics, and an
adapter only translates "enqueue job i" and "run a worker" into the library's
own recommended calls.

Where each part runs:

* ``install`` and ``client`` run in the harness process (enqueue rates and the
  untimed pre-enqueue before a drain).
* ``run_worker`` runs in a fresh child process per measurement (``bench.child``),
  so each run starts cold, imports only its own library, and the idle worker's
  resident memory can be read from ``/proc/<pid>/status``.
* ``lease_cycle`` (optional, issue 3) runs in one spawned process per client.
* ``fill`` and ``claim_latencies`` (the growth curves, ``bench.growth``) run in
  the harness process, before the workers start.

The workload is the same for every system: a no-op job whose data is
``{"i": <int>}``; the job body must call ``on_job(i)`` first thing and do
nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

# The job body calls this with the job's ``i`` as its first action.
OnJob = Callable[[int], None]

# One acquire+release pair of a lease (or lock), run in a tight loop.
LeaseCycle = Callable[[], None]


@dataclasses.dataclass(frozen=True)
class WorkerSetting:
    """How a worker is configured for one end-to-end measurement.

    ``concurrency`` is the number of jobs the one worker process may run at
    once; ``None`` means "the system's own out-of-the-box best", whatever the
    adapter documents in ``describe()`` (pgqueuer: batches of 10, unbounded).
    """

    label: str
    concurrency: int | None


class Client(Protocol):
    """Parent-side handle on one system's database (opened by ``System.client``)."""

    async def enqueue_one(self, i: int) -> None:
        """Enqueue one no-op job with data ``{"i": i}`` in its own transaction."""

    async def enqueue_batch(self, first: int, count: int) -> None:
        """Enqueue ``count`` no-op jobs (``i`` = first..first+count-1) with the
        system's batch API in one call."""

    async def reset(self) -> None:
        """Remove every job (any state) so the next run starts from an empty queue."""

    async def unfinished(self) -> int:
        """How many jobs are not yet in a finished state (checked after a drain)."""


class System(Protocol):
    """One job system under test. An adapter module exposes ``def system() -> System``."""

    name: str
    # Whether ``lease_cycle`` is implemented (issue 3's lease benchmark).
    supports_leases: bool
    # The event loop the system's own worker command uses ("uvloop" for pgqueuer's
    # ``pgq run``); the child process runs the worker on it.
    event_loop: Literal["asyncio", "uvloop"]

    def describe(self) -> dict[str, str]:
        """Version, driver and the exact worker settings, recorded in the results."""

    async def install(self, dsn: str) -> None:
        """Create the system's schema in an empty database."""

    def client(self, dsn: str) -> contextlib.AbstractAsyncContextManager[Client]:
        """Open a client (connection or pool) for enqueueing and bookkeeping."""

    async def run_worker(
        self,
        dsn: str,
        *,
        setting: WorkerSetting,
        on_job: OnJob,
        stop: asyncio.Event,
    ) -> None:
        """Run one in-process worker until ``stop`` is set, then shut it down
        gracefully (finishing and recording running jobs) and return.

        It must wake on LISTEN/NOTIFY as it would in production: the latency
        measurement starts it idle and trickles jobs in.
        """

    async def fill(self, dsn: str, *, pending: int, completed: int) -> None:
        """Growth curves (``bench.growth``): load the system's own tables with SQL
        (``generate_series``) into the state its API leaves after ``completed``
        no-op jobs finished an hour ago and ``pending`` no-op jobs (``i`` = 1..pending)
        were enqueued after them: the same rows, in every table the system writes,
        that the adapter's enqueue and worker would leave (only triggers that
        leave nothing behind, such as a per-row NOTIFY, may be off during the load).
        """

    async def claim_latencies(self, dsn: str, *, samples: int) -> list[float]:
        """Growth curves: claim one pending job ``samples`` times, one after the
        other, through the same call or statement the system's worker claims with,
        each timed from the client (milliseconds, commit included); then give the
        claimed jobs back (pending again) so they neither count nor block a drain.
        """

    def lease_cycle(self, dsn: str, index: int) -> contextlib.AbstractContextManager[LeaseCycle]:
        """Only when ``supports_leases``: open whatever one client needs and
        yield a callable doing one uncontended acquire+release of the lease
        named after ``index``. Runs in its own process, synchronously.
        """


class Recorder:
    """Counts job starts and timestamps them on the monotonic clock.

    Thread-safe, because a system may run jobs in threads; ``done`` is set on
    the event loop that created the recorder once ``target`` jobs have started.
    ``time.perf_counter`` is CLOCK_MONOTONIC on Linux, shared by all processes,
    so start times here can be compared with enqueue times taken in the parent.
    """

    def __init__(self, *, target: int) -> None:
        self.target = target
        self.count = 0
        self.starts: dict[int, float] = {}
        self.last_at: float | None = None
        self.done = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()

    def on_job(self, i: int) -> None:
        now = time.perf_counter()
        with self._lock:
            self.count += 1
            self.starts[i] = now
            finished = self.count == self.target
            if finished:
                self.last_at = now
        if finished:
            self._loop.call_soon_threadsafe(self.done.set)
