"""A freed slot on a capped host is claimed at once, not at the next poll (issue 16).

The workers here poll once an hour, so a job that starts at all started because
something made the process claim: the process's own write of an outcome (local
wake of the fetch loop), or a sibling process's NOTIFY that a unit of the host's
cap is free (heard and claimed on by the listen thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import jobwarden
from jobwarden.worker.claiming import Round
from jobwarden.worker.worker import Worker
from tests.support.waiting import TIMEOUT_SECONDS, wait_for

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


class _IdleRounds:
    """Counts the process's claim rounds that ended with nothing more to claim.

    A round ends idle only after a claim that got fewer jobs than it asked for,
    so a new one after an enqueue means "that claim found the cap full": only
    then may the test free the slot, or the freed slot would be found by a claim
    that was going to happen anyway. Both the fetch loop and the listen thread
    (on a NOTIFY) claim through :meth:`Claimer.claim_round`.
    """

    def __init__(self, worker: Worker) -> None:
        self.waits = 0
        self._round = worker.claimer.claim_round
        worker.claimer.claim_round = self  # type: ignore[method-assign]

    def __call__(self) -> Round:
        outcome = self._round()
        if outcome == "idle":
            self.waits += 1
        return outcome


def _count_waits(worker: Worker) -> _IdleRounds:
    counted = _IdleRounds(worker)
    worker.claimer.wake()  # one round through the counter before the test goes on
    wait_for(lambda: counted.waits > 0, timeout=10, message="an idle claim round")
    return counted


def test_a_freed_slot_is_claimed_again_by_the_same_process_without_a_poll(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    _gated("one", "two")
    worker = start_worker(host="capped", host_cap=1, concurrency=2, poll_interval=HOUR)
    assert worker.listening.wait(TIMEOUT_SECONDS)
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
    assert holder.listening.wait(TIMEOUT_SECONDS) and sibling.listening.wait(TIMEOUT_SECONDS)
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
