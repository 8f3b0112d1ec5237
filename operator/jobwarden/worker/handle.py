"""What an extension is given of the worker it extends: a narrow handle.

Why not the ``Worker`` itself: an extension's factory runs while the worker is
being built -- the heartbeater, the attempt runner and the claimer take the
extensions, so they are built after them -- and an extension holding the whole
worker could reach into a part that does not exist yet (``worker.claimer``
inside a constructor fails), or into any part at all. The handle names what
extensions use, and nothing else:

* what the worker is configured with and talks to (``db``, ``settings``,
  ``host``), and its ``recorder`` (built before the extensions: a standalone
  tick runs it itself);
* a few operations of the running worker, bound late: an extension calls them
  from its hooks (or from a tick), never from its factory.

The worker builds its handle in one place (``Worker._handle``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading

    from jobwarden.db.database import Database
    from jobwarden.settings import WorkerSettings
    from jobwarden.worker.context import Attempt
    from jobwarden.worker.recorder import Recorder

__all__ = ["WorkerHandle"]


@dataclasses.dataclass(frozen=True)
class WorkerHandle:
    """The worker as its extensions see it; see the module docstring."""

    db: Database
    settings: WorkerSettings
    #: This process's host name (``settings.host``): leases, the host registry, ticks.
    host: str
    #: Writes outcomes, batched and fenced; a running worker runs it in its own thread.
    recorder: Recorder
    #: A graceful stop began (claim gates answer 0 from then on).
    stopping: Callable[[], bool]
    #: Attempts claimed and not yet written (the host registry's no-prefetch rule).
    in_flight: Callable[[], int]
    #: Claim now instead of at the next poll (a unit of a host's cap was freed).
    wake: Callable[[], None]
    #: Refresh this process's claims, then reap the database's stale ones (a tick).
    reap: Callable[[], int]
    #: Run one claimed attempt in the calling thread through the extensions, then
    #: submit its outcome: the slots' path, which a tick takes too.
    execute: Callable[[Attempt], None]
    #: Heartbeat one attempt and enforce its deadline until the event is set.
    watch: Callable[[Attempt, threading.Event], None]
