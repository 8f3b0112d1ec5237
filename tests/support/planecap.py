"""xdist hands out at most ``JOBWARDEN_TEST_PLANES`` control-plane tests at once.

The suite is CPU-bound on two cores. A real-cluster test (tests/cluster) runs a control
plane, an operator, a process kubelet and its pods, most of them polling on short timers:
what such a test costs in CPU grows with its wall time, and its wall time with the load.
Sorted first (tests/conftest.py ``_cost_class``) and handed out one at a time, the tier
went to all six workers at once: load 16-33 on two cores, and the same tests used half as
much CPU again as they did on a quiet machine (docs/testing.md). Here the scheduler keeps
at most N workers holding them (running one, or given one to run next); the other workers
take the rest of the collection meanwhile.

Which tests those are is the workers' knowledge (their fixtures; tests/conftest.py marks
them ``plane``): the first worker writes their node ids to a file the controller named
(``pytest_configure_node``) after its collection is sorted, before it reports it; the
scheduler reads the file when it first hands tests out.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

#: workerinput key: where the first worker writes the control-plane tests' node ids.
_FILE_KEY = "jobwarden_plane_tests_file"
_PATH = pytest.StashKey[Path]()
#: Default cap: two cores run three control-plane tests beside the other workers' tests.
DEFAULT_PLANES = 3


def planes_at_once() -> int:
    """``JOBWARDEN_TEST_PLANES`` (a positive integer), else :data:`DEFAULT_PLANES`."""
    value = os.environ.get("JOBWARDEN_TEST_PLANES", "")
    if not value:
        return DEFAULT_PLANES
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"JOBWARDEN_TEST_PLANES={value!r}: a positive integer")
    return int(value)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the first xdist worker: write the node ids of the tests marked ``plane``
    (tests/conftest.py marks them)."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or workerinput.get("workerid") != "gw0" or _FILE_KEY not in workerinput:
        return
    path = Path(workerinput[_FILE_KEY])
    partial = path.with_suffix(".partial")
    partial.write_text("".join(f"{item.nodeid}\n" for item in items
                               if item.get_closest_marker("plane") is not None))
    partial.replace(path)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None and config.pluginmanager.hasplugin("xdist"):
        config.stash[_PATH] = Path(tempfile.mkdtemp(prefix="jobwarden-planes-")) / "tests"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    path = node.config.stash.get(_PATH, None)
    if path is not None:
        node.workerinput[_FILE_KEY] = str(path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScheduling | None:
    if config.getoption("dist") != "load":
        return None
    return CappedLoadScheduling(config, log, plane_tests=config.stash[_PATH],
                                cap=planes_at_once())


class CappedLoadScheduling(LoadScheduling):
    """xdist's ``load`` with at most ``cap`` workers holding a plane test at a time."""

    def __init__(self, config: pytest.Config, log: Any, *, plane_tests: Path,
                 cap: int) -> None:
        super().__init__(config, log)
        self.plane_tests = plane_tests
        self.cap = cap
        self._planes: frozenset[int] | None = None

    def _plane_indices(self) -> frozenset[int]:
        if self._planes is None:
            assert self.collection is not None
            ids = (set(self.plane_tests.read_text().split()) if self.plane_tests.exists()
                   else set())
            self._planes = frozenset(i for i, nodeid in enumerate(self.collection)
                                     if nodeid in ids)
        return self._planes

    def _send_tests(self, node: Any, num: int) -> None:
        # The cap is on workers holding a plane test (running or next): a worker runs one
        # test at a time, so no more than ``cap`` run at once, and a worker that holds one
        # may be given the next one without waiting for a free place.
        planes = self._plane_indices()
        holders = sum(1 for pending in self.node2pending.values()
                      if any(i in planes for i in pending))
        may_take = any(i in planes for i in self.node2pending[node]) or holders < self.cap
        chosen = list(itertools.islice(
            (i for i in self.pending if may_take or i not in planes), num))
        if chosen:
            taken = set(chosen)
            self.pending[:] = [i for i in self.pending if i not in taken]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        # A worker left short because only capped tests remained is served now that one
        # may have finished (else it would wait, or never be shut down).
        for other in self.nodes:
            if other is not node and len(self.node2pending[other]) < 2:
                self.check_schedule(other)
