"""A periodic task may say when its next pass is due (``PeriodicTask.next_in``): the
operator's schedule loop passes at the next slot, not a check interval later."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from jobwarden.maintenance.looping import PeriodicTask, TaskLoop
from tests.support.waiting import wait_for

HOUR = 3600.0


@pytest.fixture
def looping() -> Iterator[Callable[[PeriodicTask], None]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(task: PeriodicTask) -> None:
        thread = threading.Thread(target=TaskLoop([task], stop=stop).run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def test_a_pass_that_names_its_next_one_sooner_than_the_interval_gets_it(
        looping: Callable[[PeriodicTask], None]) -> None:
    asked: list[int] = []
    task = PeriodicTask(name="slots", interval=HOUR, run=lambda: None, first_delay=0.0,
                        next_in=lambda: asked.append(1) or 0.0)
    looping(task)
    # An hour apart by the interval; three passes only because each said "now" (held
    # apart by SOONEST_SECONDS).
    wait_for(lambda: task.passes >= 3, timeout=20, message="three passes")
    assert len(asked) >= 3


def test_a_pass_that_names_nothing_sooner_or_fails_to_keeps_the_interval(
        looping: Callable[[PeriodicTask], None]) -> None:
    def broken() -> float | None:
        raise RuntimeError("the database is away")

    quiet = PeriodicTask(name="quiet", interval=HOUR, run=lambda: None, first_delay=0.0,
                         next_in=lambda: None)
    failing = PeriodicTask(name="failing", interval=HOUR, run=lambda: None, first_delay=0.0,
                           next_in=broken)
    gated = PeriodicTask(name="gated", interval=HOUR, run=lambda: None, first_delay=0.0,
                         gate=lambda: False, next_in=lambda: 0.0)
    for task in (quiet, failing, gated):
        looping(task)
    wait_for(lambda: quiet.passes == 1 and failing.passes == 1
             and gated.progress.rounds == 1, timeout=10, message="the first passes")
    # Each one's next pass is an interval (+-10 %) away, not sooner: a gated pass (this
    # process does not hold the loop's lease) is not asked.
    for task in (quiet, failing, gated):
        assert task.due_in is None
        assert task.next_at - time.monotonic() > 0.8 * HOUR, task.name
