"""DNS rebinding: the console answers only to the Host names it is meant to have.

A page on ``evil.example`` whose name an attacker re-points at 127.0.0.1 sends
``Host: evil.example:PORT`` and a matching ``Origin``, so the CSRF and Origin
checks alone pass. The Host check comes before anything else: such a request
gets no page, no session cookie and no CSRF token, and changes nothing.
The same requests over a real socket (uvicorn) and in-process.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

import jobwarden
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database
from tests.console.browser import serve
from tests.console.conftest import CSRF, csrf_of
from tests.support import testjobs

SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options")


def _paused(client: jobwarden.Client) -> dict[str, bool]:
    return {q.queue: q.paused for q in client.queues()}


def _assert_refused(response: Any) -> None:
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    headers = {k.lower(): v for k, v in response.headers.items()}
    assert status == 421, status
    for name in SECURITY_HEADERS:
        assert name in headers, name
    assert "set-cookie" not in headers


@pytest.mark.parametrize("host", ["evil.example:8787", "evil.example", "127.0.0.1.evil.example",
                                  "localhost.evil.example:8787", "EVIL.example", ""])
def test_a_foreign_host_gets_no_page_no_session_and_no_token(console: TestClient,
                                                             host: str) -> None:
    for path in ["/", "/queues", "/jobs", "/healthz", "/static/console.css", "/nope"]:
        page = console.get(path, headers={"Host": host})
        _assert_refused(page)
        assert CSRF.search(page.text) is None and "<html" not in page.text


def test_a_forged_host_with_a_matching_origin_cannot_pause_a_queue(
        console: TestClient, client: jobwarden.Client) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    token = csrf_of(console, "/queues")  # the best case for the attacker: a valid token
    forged = console.post("/actions/pause-queue", data={"queue": "mail", "csrf": token},
                          headers={"Host": "evil.example:8787",
                                   "Origin": "http://evil.example:8787"},
                          follow_redirects=False)
    _assert_refused(forged)
    assert _paused(client) == {"mail": False}
    done = console.post("/actions/pause-queue", data={"queue": "mail", "csrf": token},
                        follow_redirects=False)
    assert done.status_code == 303 and _paused(client) == {"mail": True}


@pytest.mark.parametrize("host", ["127.0.0.1:8787", "localhost:8787", "LOCALHOST:1234",
                                  "[::1]:8787", "127.0.0.1", "localhost"])
def test_the_local_names_are_served(console: TestClient, host: str) -> None:
    page = console.get("/jobs", headers={"Host": host})
    assert page.status_code == 200 and CSRF.search(page.text)


def test_allowed_hosts_add_names_and_a_port_pins_one(
        make_console: Callable[..., TestClient]) -> None:
    http_ = make_console(host="127.0.0.2",
                         allowed_hosts=("jobs.internal", "ops.internal:9000"))
    served = {host: http_.get("/", headers={"Host": host}).status_code
              for host in ["127.0.0.2:8787", "jobs.internal", "jobs.internal:1",
                           "ops.internal:9000", "ops.internal:9001", "ops.internal",
                           "evil.example"]}
    assert served == {"127.0.0.2:8787": 200, "jobs.internal": 200, "jobs.internal:1": 200,
                      "ops.internal:9000": 200, "ops.internal:9001": 421, "ops.internal": 421,
                      "evil.example": 421}


def test_with_a_token_any_host_is_served_to_whoever_holds_it(
        make_console: Callable[..., TestClient]) -> None:
    token = "s3cret-token-0123456789"
    remote = make_console(host="0.0.0.0", token=token)
    bearer = {"Authorization": f"Bearer {token}"}
    assert remote.get("/", headers={"Host": "console.example.com", **bearer}).status_code == 200
    assert remote.get("/", headers={"Host": "console.example.com"}).status_code == 401
    pinned = make_console(host="0.0.0.0", token=token, allowed_hosts=("console.example.com",))
    assert pinned.get("/", headers={"Host": "console.example.com", **bearer}).status_code == 200
    assert pinned.get("/", headers={"Host": "evil.example", **bearer}).status_code == 421


def test_over_a_real_socket_a_forged_host_reads_nothing_and_changes_nothing(
        console_db: Database, client: jobwarden.Client) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    with serve(jobwarden.Client(database=console_db), ConsoleSettings()) as url:
        port = int(url.rsplit(":", 1)[1])

        def request(method: str, path: str, host: str, body: str = "",
                    headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.putrequest(method, path, skip_host=True)
            conn.putheader("Host", host)
            for key, value in (headers or {}).items():
                conn.putheader(key, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body.encode())
            response = conn.getresponse()
            response.read()
            conn.close()
            return response

        evil = f"evil.example:{port}"
        page = request("GET", "/queues", evil)
        _assert_refused(page)
        # The attacker's best case: a real session and token, fetched under the real name.
        own = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        own.request("GET", "/queues")
        answer = own.getresponse()
        text = answer.read().decode()
        own.close()
        cookie = answer.getheader("set-cookie", "").split(";", 1)[0]
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', text)
        assert found and cookie
        forged = request("POST", "/actions/pause-queue", evil,
                         body=f"queue=mail&csrf={found.group(1)}",
                         headers={"Origin": f"http://{evil}", "Cookie": cookie,
                                  "Content-Type": "application/x-www-form-urlencoded"})
        _assert_refused(forged)
        assert _paused(client) == {"mail": False}


def test_a_malformed_allowed_host_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "jobwarden", "console", "--allowed-host",
                          "http://evil/"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--allowed-host" in out.stderr


def test_a_genuine_server_error_still_carries_the_security_headers(
        console: TestClient, client: jobwarden.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(jobwarden.Client, "queues", broken)
    page = console.get("/queues")
    assert page.status_code == 500 and "a bug" not in page.text
    for name in SECURITY_HEADERS:
        assert name in page.headers, name
