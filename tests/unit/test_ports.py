"""The test servers' ports (tests/support/ports.py): never one the kernel may hand out as
an ephemeral port, never the same one to two processes, never one that is bound."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest

from tests.support import ports


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A counter of this test's own, so no other test process advances it meanwhile."""
    path = tmp_path / "ports"
    monkeypatch.setattr(ports, "COUNTER", path)
    return path


def _take(count: int) -> list[int]:
    return [ports.free_port() for _ in range(count)]


def test_ports_are_below_the_ephemeral_range_and_handed_out_in_sequence(counter: Path
                                                                         ) -> None:
    taken = _take(3)
    assert all(ports.FIRST < port < ports.ephemeral_start() for port in taken), taken
    assert taken == [taken[0], taken[0] + 1, taken[0] + 2]
    assert counter.read_text() == str(taken[-1])


def test_processes_taking_ports_at_once_never_get_the_same_one(counter: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        batches = pool.map(_take, [50] * 4)
    taken = [port for batch in batches for port in batch]
    assert len(set(taken)) == len(taken) == 200


def test_a_bound_port_is_skipped(counter: Path) -> None:
    port = _take(1)[0]
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        counter.write_text(str(port - 1))  # the bound port is next in line
        assert ports.free_port() == port + 1


def test_the_range_wraps_round_to_its_first_port(counter: Path) -> None:
    counter.write_text(str(ports.ephemeral_start() - 1))
    assert ports.free_port() == ports.FIRST
