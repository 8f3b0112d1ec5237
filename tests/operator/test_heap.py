"""The freed peak of a start goes back to the system: glibc's malloc_trim, once a sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobwarden.controller import heap
from tests.operator.test_resyncing import Deleter, FakeObjects, Reconciler, resync_of


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_trim_returns_the_free_pages_a_fragmented_heap_keeps():
    """What a start does to the heap: many bodies-sized blocks, a few of them kept,
    spread over every page. Freed, they stay resident; trimmed, they go."""
    if heap._malloc_trim() is None:
        pytest.skip("not glibc: nothing to trim")
    blocks = [bytes(2000) for _ in range(100_000)]  # ~200 MiB in malloc's heap
    kept = blocks[::50]
    del blocks
    before = rss_mib()
    heap.trim()
    after = rss_mib()
    assert len(kept) == 2000
    assert before - after > 100, (before, after)


def test_the_resync_loop_trims_after_each_sweep(monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    monkeypatch.setattr(heap, "trim", lambda: calls.append(1) or True)
    loop, _ = resync_of(Reconciler({}), Deleter(), FakeObjects({}))
    loop.run_once()  # the first pass sweeps
    loop.run_once()  # within the sweep period: no sweep, no trim
    assert calls == [1]
    loop._swept_at = None
    loop.run_once()
    assert calls == [1, 1]
