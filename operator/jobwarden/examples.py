"""Example jobs that ``jobwarden dev`` runs: fast, flaky, failing, slow and async.

They live on queues of their own (``DEMO_QUEUES``) and ``dev``'s workers take
only those, so a user's worker started against ``dev``'s database runs all of
the user's jobs itself: the demo never takes a job it was not given.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import jobwarden

#: The demo's queues: ``jobwarden dev``'s workers take these and nothing else.
DEMO_QUEUE = "demo"
DEMO_SLOW_QUEUE = "demo-reports"
DEMO_QUEUES = (DEMO_QUEUE, DEMO_SLOW_QUEUE)


class Greet(jobwarden.Job):
    """A fast job that returns a result."""

    queue = DEMO_QUEUE

    def perform(self, data: Any) -> dict[str, str]:
        return {"greeting": f"hello, {data.get('name', 'world')}"}


class Flaky(jobwarden.Job):
    """Fails about a third of its attempts; retries with a short backoff."""

    queue = DEMO_QUEUE
    max_retries = 5
    backoff_base = 0.5

    def perform(self, data: Any) -> str:
        if random.random() < 0.33:
            raise RuntimeError("flaky dependency timed out (on purpose)")
        return "ok"


class AlwaysFails(jobwarden.Job):
    """Exhausts its retries and ends as failed."""

    queue = DEMO_QUEUE
    max_retries = 2
    backoff_base = 0.5

    def perform(self, data: Any) -> None:
        raise ValueError(f"cannot process order {data.get('order')}: invalid (on purpose)")


class Report(jobwarden.Job):
    """A slow job that heartbeats between units of work."""

    queue = DEMO_SLOW_QUEUE
    timeout = 60

    def perform(self, data: Any) -> int:
        steps = int(data.get("steps", 10))
        for _ in range(steps):
            time.sleep(0.3)
            self.heartbeat()
        return steps


@jobwarden.job(queue=DEMO_QUEUE)
async def ping(host: str = "localhost") -> str:
    """An async function job."""
    await asyncio.sleep(0.05)
    return f"pong from {host}"
