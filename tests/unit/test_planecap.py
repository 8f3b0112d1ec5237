"""The xdist scheduler's cap on control-plane tests (tests/support/planecap.py), driven as
xdist's controller drives it: workers that run their queue one test at a time, in order,
and report each test's end."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.planecap import CappedLoadScheduling


class Options:
    """The two options the scheduler reads from pytest's config."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> Any:
        assert name == "tx"
        return [f"{self.workers}*popen"]

    def getoption(self, name: str) -> Any:
        assert name == "maxschedchunk"
        return 1


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        pass

    def shutdown(self) -> None:
        self.shutting_down = True


def run(tmp_path: Path, *, tests: list[str], planes: set[str], workers: int, cap: int,
        seed: int) -> tuple[list[str], int]:
    """Run the collection through the scheduler, each step finishing one worker's current
    test (chosen at random): the tests in the order they ran, and the most workers seen
    holding a plane test at once."""
    listed = tmp_path / "planes"
    listed.write_text("".join(f"{t}\n" for t in planes))
    scheduler = CappedLoadScheduling(Options(workers), None, plane_tests=listed, cap=cap)
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, tests)
    scheduler.schedule()
    ran: list[str] = []
    most = 0
    pick = random.Random(seed)
    while True:
        holders = sum(1 for pending in scheduler.node2pending.values()
                      if any(tests[i] in planes for i in pending))
        most = max(most, holders)
        # A worker runs its first queued test once it knows the next, or is shut down.
        runnable = [n for n in nodes if len(scheduler.node2pending[n]) >= 2
                    or (n.shutting_down and scheduler.node2pending[n])]
        if not runnable:
            break
        node = pick.choice(runnable)
        index = scheduler.node2pending[node][0]
        ran.append(tests[index])
        scheduler.mark_test_complete(node, index)
    assert all(node.shutting_down for node in nodes), "a worker was never shut down"
    return ran, most


@pytest.mark.parametrize("seed", range(5))
def test_no_more_than_the_cap_of_workers_hold_plane_tests_and_every_test_runs_once(
        tmp_path: Path, seed: int) -> None:
    tests = [f"tests/cluster/test_{i}.py::t" for i in range(12)] + [
        f"tests/unit/test_{i}.py::t" for i in range(40)]
    planes = set(tests[:12])
    ran, most = run(tmp_path, tests=tests, planes=planes, workers=6, cap=3, seed=seed)
    assert sorted(ran) == sorted(tests)
    assert most == 3
    # The other workers took the rest meanwhile: light tests ran before the last plane test.
    assert min(ran.index(t) for t in tests[12:]) < max(ran.index(t) for t in planes)


def test_when_only_plane_tests_remain_they_all_run_and_every_worker_is_shut_down(
        tmp_path: Path) -> None:
    tests = [f"tests/cluster/test_{i}.py::t" for i in range(9)]
    ran, most = run(tmp_path, tests=tests, planes=set(tests), workers=4, cap=2, seed=1)
    assert sorted(ran) == sorted(tests)
    assert most <= 2


def test_without_the_list_nothing_is_capped(tmp_path: Path) -> None:
    tests = [f"tests/cluster/test_{i}.py::t" for i in range(12)]
    listed = tmp_path / "absent"
    scheduler = CappedLoadScheduling(Options(6), None, plane_tests=listed, cap=1)
    nodes = [Worker(f"gw{i}") for i in range(6)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, tests)
    scheduler.schedule()
    assert all(scheduler.node2pending[n] for n in nodes)
