"""A freed slot on a capped host is claimed at once, not at the next poll (issue 16).

The workers here poll once an hour, so a job that starts at all started because
something woke the fetch loop: the process's own write of an outcome (local
wake), or a sibling process's NOTIFY that a unit of the host's cap is free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import jobwarden
from jobwarden.worker.worker import Worker
from tests.support.waiting import wait_for

HOUR = 3600.0
#: One event per job name: the test lets a job finish by setting it.
_release: dict[str, threading.Event] = {}
_started: dict[str, threading.Event] = {}


class Gated(jobwarden.Job):
    """Runs until the test releases it (in-process workers only)."""

    max_retries = 0

    def perform(self, data: dict[str, str]) -> None:
        name = data["name"]
        _started[name].set()
        assert _release[name].wait(60), f"job {name} was never released"


def _gated(*names: str) -> None:
    for name in names:
        _release[name] = threading.Event()
        _started[name] = threading.Event()


def _running(client: jobwarden.Client) -> int:
    return sum(n for n in [h.running for h in client.hosts.status(host="capped")])


class _CountedWaits(threading.Event):
    """The fetch loop's wake event, counting how often the loop went to sleep on it.

    A fetch loop only sleeps after a claim that got fewer jobs than it asked for,
    so a new sleep after an enqueue means "that claim found the cap full": only
    then may the test free the slot, or the freed slot would be found by a claim
    that was going to happen anyway.
    """

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        return super().wait(timeout)


def _count_waits(worker: Worker) -> _CountedWaits:
    counted = _CountedWaits()
    previous = worker.claimer.wake_event
    worker.claimer.wake_event = counted
    previous.set()  # the loop may be asleep on the old event: let it move to the new one
    wait_for(lambda: counted.waits > 0, timeout=10, message="the fetch loop sleeps")
    return counted


def test_a_freed_slot_is_claimed_again_by_the_same_process_without_a_poll(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    _gated("one", "two")
    worker = start_worker(host="capped", host_cap=1, concurrency=2, poll_interval=HOUR)
    assert worker.listening.wait(10)
    waits = _count_waits(worker)
    before = waits.waits
    # One NOTIFY: the loop claims "one" (the cap allows one), claims again at once
    # (it got all it asked for), finds the cap full and sleeps.
    client.enqueue_many(Gated, [{"name": "one"}, {"name": "two"}])
    assert _started["one"].wait(30)
    wait_for(lambda: waits.waits > before, timeout=30, message="the cap-full claim")
    assert client.stats()["default"]["pending"] == 1
    _release["one"].set()
    assert _started["two"].wait(30), "the freed slot was not claimed before the poll"
    _release["two"].set()


def test_a_freed_slot_wakes_a_sibling_process_of_the_host_without_a_poll(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    """Only the sibling can run the second job (its queue), so only its wake counts."""
    _gated("first", "second")
    holder = start_worker(host="capped", host_cap=1, concurrency=1, poll_interval=HOUR,
                          queues=("a",))
    sibling = start_worker(host="capped", host_cap=1, concurrency=1, poll_interval=HOUR,
                           queues=("b",))
    assert holder.listening.wait(10) and sibling.listening.wait(10)
    client.enqueue(Gated, {"name": "first"}, queue="a")
    assert _started["first"].wait(30)
    waits = _count_waits(sibling)
    before = waits.waits
    client.enqueue(Gated, {"name": "second"}, queue="b")  # the sibling finds the cap full
    wait_for(lambda: waits.waits > before, timeout=30, message="the cap-full claim")
    assert client.stats()["b"]["pending"] == 1
    assert _running(client) == 1
    _release["first"].set()
    assert _started["second"].wait(30), "the sibling was not woken by the freed slot"
    _release["second"].set()
