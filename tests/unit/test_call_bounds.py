"""Call bounds: how they are configured, and the watchdog that enforces them (issue 26).

The watchdog is exercised on a real socket pair standing in for a connection's
socket: what it does to a call past its deadline is what libpq then sees.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.db.deadlines import TCP_OPTIONS, CallBounds, Watchdog, tcp_options
from jobwarden.settings import WorkerSettings
from jobwarden.worker.worker import _fit_heartbeat_bound
from tests.support.waiting import wait_for


def test_bounds_come_from_their_variables_with_units_and_bad_values_are_refused() -> None:
    bounds = CallBounds.from_env({"JOBWARDEN_DB_CALL_TIMEOUT": "45s",
                                  "JOBWARDEN_DB_LEASE_TIMEOUT": "500ms",
                                  "JOBWARDEN_DB_MIGRATE_TIMEOUT": "1h"})
    assert (bounds.call, bounds.lease, bounds.migrate) == (45.0, 0.5, 3600.0)
    assert (bounds.claim, bounds.heartbeat, bounds.record) == (15.0, 10.0, 15.0)
    with pytest.raises(errors.ConfigurationError, match="JOBWARDEN_DB_CLAIM_TIMEOUT"):
        CallBounds.from_env({"JOBWARDEN_DB_CLAIM_TIMEOUT": "soon"})
    with pytest.raises(errors.ConfigurationError, match="heartbeat bound"):
        CallBounds(heartbeat=float("inf"))


def test_the_dsn_keeps_the_tcp_options_it_sets_itself() -> None:
    assert tcp_options("postgresql://u@db.example/app") == dict(TCP_OPTIONS)
    mine = tcp_options("host=db.example keepalives=0 tcp_user_timeout=5000")
    assert "keepalives" not in mine and "tcp_user_timeout" not in mine
    assert mine["keepalives_idle"] == TCP_OPTIONS["keepalives_idle"]


class _Conn:
    """What the watchdog reads of a psycopg connection: ``pgconn.socket``."""

    def __init__(self, sock: socket.socket) -> None:
        self.pgconn = self
        self.socket = sock.fileno()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    yield ours, peer
    ours.close()
    peer.close()


def test_a_call_past_its_deadline_has_its_socket_shut_down_and_disarm_says_so(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _silent_peer = pair
    watchdog = Watchdog(tick=0.01)
    token = watchdog.arm(_Conn(ours), deadline=0.0)  # already past
    ours.settimeout(30)
    assert ours.recv(1) == b""  # what libpq reads: end of file, as for a dropped connection
    assert watchdog.disarm(token) is False
    assert watchdog.abandoned == 1


def test_what_an_abandoned_call_left_unsent_never_reaches_the_server() -> None:
    """A request stuck behind a partition is dropped with its connection: once the
    network is back, the server must not receive it and run it (seen in a full run: a
    claim abandoned during a packet drop reached the server when the drop ended and
    held its jobs, unknown to the worker, until the reaper freed them a minute later).
    Here the server reads nothing until the caller has closed the abandoned connection,
    so the tail of the request is still in the client's send queue at the close."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ours = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    ours.setblocking(False)
    sent = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            sent += ours.send(b"q" * 65536)
    watchdog = Watchdog(tick=0.01)
    token = watchdog.arm(_Conn(ours), deadline=0.0)  # already past
    wait_for(lambda: watchdog.abandoned == 1, timeout=60, message="the call abandoned")
    assert watchdog.disarm(token) is False
    ours.close()  # what the caller does with an abandoned connection
    server.settimeout(60)
    received = 0
    with pytest.raises(ConnectionResetError):
        while chunk := server.recv(65536):
            received += len(chunk)
    assert received < sent
    server.close()
    listener.close()


def test_a_call_answered_in_time_is_left_alone(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    watchdog = Watchdog(tick=0.01)
    token = watchdog.arm(_Conn(ours), deadline=float("1e12"))
    peer.sendall(b"x")
    assert ours.recv(1) == b"x"
    assert watchdog.disarm(token) is True
    assert watchdog.abandoned == 0
    peer.sendall(b"y")
    assert ours.recv(1) == b"y"  # still usable: nothing was shut down


def test_no_bound_arms_nothing() -> None:
    watchdog = Watchdog()
    assert watchdog.arm(object(), deadline=float("inf")) == 0
    assert watchdog.disarm(0) is True


def test_a_worker_leaves_room_for_a_second_heartbeat_inside_the_grace(db: Database) -> None:
    # interval 1 s, grace 5 s: an abandoned heartbeat at 1 + b, another answered by
    # 1 + 2b <= 5, so b is lowered from its default 10 s to 2 s.
    db.bounds = db.connections.bounds = CallBounds()
    _fit_heartbeat_bound(db, WorkerSettings(heartbeat_interval=1.0, heartbeat_grace=5.0))
    assert db.bounds.heartbeat == 2.0
    _fit_heartbeat_bound(db, WorkerSettings(heartbeat_interval=5.0, heartbeat_grace=60.0))
    assert db.bounds.heartbeat == 2.0  # never raised back: only lowered
    db.bounds = CallBounds(heartbeat=3.0)
    _fit_heartbeat_bound(db, WorkerSettings())  # 5 + 2 x 3 <= 60: kept
    assert db.bounds.heartbeat == 3.0
