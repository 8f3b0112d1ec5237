"""What a worker can be extended with, and nothing else: the ``WorkerExtension`` protocol.

Why a protocol: exclusive jobs (leases), the host registry (drain and per-host
cap), the schedule runner and the tick route all change how a worker claims,
runs and stops. They used to do it by assigning about ten attributes of a
``Worker`` from the outside, which tied the worker and its plugins into an
import cycle and left the worker's behaviour scattered over modules it did not
know. Now the worker knows extensions only through the hooks below (in the
manner of River's worker middleware and Oban's plugins) and never imports one;
the composition root (:mod:`jobwarden.assembly`) is the only place that knows
them all. An extension is built by an :data:`ExtensionFactory` from the worker's
narrow :class:`~jobwarden.worker.handle.WorkerHandle`, not from the ``Worker``.

The hooks, each optional (derive from :class:`Extension` for no-op defaults):

``claim_gate(free)``     before every claim: how many of ``free`` slots may be
                         claimed now (0 stops claiming: drain, stopping).
``caps_claims``          True: claims lock the host row and honour its cap.
``around_attempt(...)``  wraps one attempt; calls ``call_next(context)`` to run
                         it, or returns an outcome without running it (a busy
                         lease); may replace the context (lease renewal on
                         ``Job.heartbeat()``) and adjust the outcome.
``heartbeat(alive)``     after each batch heartbeat, with the attempts still alive.
``outcomes_written()``   after the recorder wrote a batch of outcomes: the
                         attempts' slots, and units of a host cap, are free.
``periodic_tasks()``     work the maintenance thread runs every few seconds.
``routes()``             HTTP routes served beside /metrics, /healthz, /readyz.
``on_stopping()``        a graceful stop began (self-drain).
``on_stopped()``         the worker stopped (deregistration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from jobwarden.maintenance.looping import PeriodicTask

if TYPE_CHECKING:
    from jobwarden.jobs.definitions import Job
    from jobwarden.worker.context import Attempt, AttemptContext, Outcome
    from jobwarden.worker.handle import WorkerHandle

__all__ = ["Extension", "ExtensionFactory", "PeriodicTask", "Route", "WorkerExtension"]

#: An HTTP route: (method, path, query, headers, body) -> (status, JSON body).
Route = Callable[[str, str, str, dict[str, str], bytes], tuple[int, dict[str, Any]]]
#: Runs one attempt with the given context (the next link of the chain).
CallNext = Callable[["AttemptContext"], "Outcome"]


class WorkerExtension(Protocol):
    """The hooks a worker calls; see the module docstring for each one's contract."""

    @property
    def caps_claims(self) -> bool: ...

    def claim_gate(self, free: int) -> int: ...

    def around_attempt(self, attempt: Attempt, job_class: type[Job], context: AttemptContext,
                       call_next: CallNext) -> Outcome: ...

    def heartbeat(self, alive: Sequence[Attempt]) -> None: ...

    def outcomes_written(self) -> None: ...

    def periodic_tasks(self) -> Sequence[PeriodicTask]: ...

    def routes(self) -> Mapping[str, Route]: ...

    def on_stopping(self) -> None: ...

    def on_stopped(self) -> None: ...


class Extension:
    """No-op defaults for every hook: an extension overrides only what it changes."""

    @property
    def caps_claims(self) -> bool:
        return False

    def claim_gate(self, free: int) -> int:
        return free

    def around_attempt(self, attempt: Attempt, job_class: type[Job], context: AttemptContext,
                       call_next: CallNext) -> Outcome:
        return call_next(context)

    def heartbeat(self, alive: Sequence[Attempt]) -> None:
        return None

    def outcomes_written(self) -> None:
        return None

    def periodic_tasks(self) -> Sequence[PeriodicTask]:
        return ()

    def routes(self) -> Mapping[str, Route]:
        return {}

    def on_stopping(self) -> None:
        return None

    def on_stopped(self) -> None:
        return None


#: Builds one extension for a worker, from the worker's narrow handle (called once,
#: while the worker is built: see :mod:`jobwarden.worker.handle`).
ExtensionFactory = Callable[["WorkerHandle"], WorkerExtension]
