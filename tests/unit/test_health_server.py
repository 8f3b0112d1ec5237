"""The HTTP endpoints' server (observability/health.py) when a client goes away.

A probe that gives up (kubelet's timeoutSeconds under load) or a scrape cut short closes
its connection before the answer is written. That is the client's business: the server
says so in one DEBUG line and keeps serving. It never prints the standard library's
"Exception occurred during processing of request" traceback, which every log check
(the helm upgrade test's "no error in an old pod's log") reads as a failure.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from jobwarden.observability.health import HealthServer
from tests.support.waiting import wait_for


@pytest.fixture
def slow_probe() -> Iterator[tuple[HealthServer, threading.Event, threading.Event]]:
    """A server whose /healthz answers once ``release`` is set (``entered`` says it is
    waiting): the client can leave while the answer is being made."""
    entered, release = threading.Event(), threading.Event()

    def healthy() -> tuple[bool, str]:
        if not release.is_set():
            entered.set()
            release.wait(timeout=60)
        return True, "ok"

    server = HealthServer(host="127.0.0.1", port=0, ready=lambda: (True, "ready"),
                          healthy=healthy)
    server.start()
    try:
        yield server, entered, release
    finally:
        release.set()
        server.close()


def reset(sock: socket.socket) -> None:
    """Close with an RST, as a client that gave up mid-request does (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_gone_before_the_answer_is_one_debug_line_not_a_traceback(
        slow_probe: tuple[HealthServer, threading.Event, threading.Event],
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    server, entered, release = slow_probe
    caplog.set_level(logging.DEBUG, logger="jobwarden.http")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
    assert entered.wait(timeout=60)
    reset(sock)
    release.set()

    # What the server did about it: a line in its log, or (the bug) a traceback on stderr.
    stderr: list[str] = []

    def answered() -> bool:
        stderr.append(capsys.readouterr().err)
        return bool("".join(stderr)) or any("went away" in r.getMessage()
                                            for r in caplog.records)

    wait_for(answered, timeout=60, message="the server to deal with the gone client")
    assert "".join(stderr) == ""
    gone = [r for r in caplog.records if r.name == "jobwarden.http"
            and "went away" in r.getMessage()]
    assert [r.levelno for r in gone] == [logging.DEBUG], caplog.text
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == [], caplog.text
    # ... and it keeps serving.
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=30) as r:
        assert r.status == 200


def test_an_error_of_the_servers_own_is_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """Only a client going away is quiet: a failure of the server's own code is an ERROR
    with its traceback, in the process's log (not bare on stderr)."""

    def broken() -> tuple[bool, str]:
        raise ValueError("a probe callback failed")

    server = HealthServer(host="127.0.0.1", port=0, ready=broken, healthy=broken)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: probe\r\n\r\n")
            assert sock.recv(1) == b""  # the handler died: closed, nothing written
        errors = wait_for(lambda: [r for r in caplog.records if r.levelno == logging.ERROR],
                          timeout=60, message="the error logged")
    finally:
        server.close()
    assert [r.name for r in errors] == ["jobwarden.http"]
    # The traceback is in the record: as its exc_info, or folded into its message when the
    # tick route's token filter sits on this logger (a worker serving /tick; another test
    # in this process may have added it).
    shown = logging.Formatter().format(errors[0])
    assert "Traceback" in shown and "ValueError: a probe callback failed" in shown
    assert capsys.readouterr().err == ""
