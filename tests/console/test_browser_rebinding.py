"""DNS rebinding in a real Chromium: a hostile page can neither read nor operate the console.

The attack as it happens: a developer opens ``http://evil.example:PORT/``; the
attacker's server answers with a page whose script waits, then the attacker's
DNS re-points ``evil.example`` at 127.0.0.1 and the script's same-origin
requests reach the developer's console on that port (``Host: evil.example``,
``Origin: http://evil.example:PORT``, the console's own session cookie).

Here Chromium resolves ``evil.example`` to 127.0.0.1 (``--host-resolver-rules``);
the attacker's server answers on a listening socket first and serves the page,
then stops (closing every connection it accepted, the browser's spare ones too),
and the console serves that same socket: the same origin, a new
server behind it, which is what the rebinding achieves (one socket throughout,
so no other process can take the port in between). The page's own script then reads
``/queues``, takes the CSRF token it finds and posts a pause.

The control case starts the console with ``--allowed-host evil.example`` (an
operator who chose to trust that name): the very same script then reads the
page and pauses the queue, so the refusal in the default case is the Host
check's doing, not a broken script.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import browser_paths

if browser_paths() is None:
    pytest.skip("chromium/chromedriver not installed: browser tests skipped",
                allow_module_level=True)

import jobwarden
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database
from tests.console.browser import chromium, listening_socket, serve
from tests.support import testjobs

pytestmark = pytest.mark.slow

ATTACK_PAGE = b"""<!doctype html>
<html><head><title>cute cats</title></head><body><p>cats</p>
<script>
window.attack = async function () {
  const seen = {};
  try {
    const page = await fetch("/queues", {credentials: "include"});
    const text = await page.text();
    const token = text.match(/name="csrf" value="([0-9a-f]+)"/);
    seen.read = page.status;
    seen.sawQueue = text.includes('data-queue="mail"');
    seen.token = token !== null;
    const body = new URLSearchParams({queue: "mail", csrf: token ? token[1] : ""});
    const post = await fetch("/actions/pause-queue", {method: "POST", body: body,
                                                     credentials: "include",
                                                     redirect: "manual"});
    seen.post = post.type === "opaqueredirect" ? 303 : post.status;
  } catch (error) {
    seen.error = String(error);
  }
  return seen;
};
</script></body></html>
"""


class _Attacker(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(ATTACK_PAGE)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(ATTACK_PAGE)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _AttackerServer(http.server.ThreadingHTTPServer):
    """Remembers every connection it accepts, so that stopping can close them all.

    Chromium opens spare connections to an origin ahead of need (preconnect). One the
    attacker's server accepted stays idle in its handler thread after ``shutdown()``
    (which only stops accepting), and the page's next fetch would be answered by the
    attacker instead of the console: the "rebinding" would not have happened.
    """

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted: list[socket.socket] = []

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        self.accepted.append(conn)
        return conn, address

    def close_accepted(self) -> None:
        for conn in self.accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    listening = listening_socket()
    yield listening
    listening.close()


@contextlib.contextmanager
def _attacker_on(sock: socket.socket) -> Iterator[None]:
    """The attacker's server answering on ``sock`` until the block ends (sock stays open)."""
    server = _AttackerServer(sock.getsockname(), _Attacker, bind_and_activate=False)
    server.socket = sock
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="attacker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.close_accepted()


def _attack(tmp_path: Path, console_db: Database, sock: socket.socket,
            settings: ConsoleSettings) -> dict[str, Any]:
    port = sock.getsockname()[1]
    flags = ("--host-resolver-rules=MAP evil.example 127.0.0.1",
             "--disable-features=HttpsUpgrades")
    with chromium(tmp_path / "profile", flags=flags) as browser:
        with _attacker_on(sock):
            browser.get(f"http://evil.example:{port}/")
            assert browser.title == "cute cats"  # the attacker's page, on evil.example
        # "The DNS answer changes": the same origin now reaches the console.
        with serve(jobwarden.Client(database=console_db), settings, sock=sock):
            browser.set_script_timeout(60)
            seen: dict[str, Any] = browser.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "window.attack().then(done, (e) => done({error: String(e)}));")
            assert browser.current_url == f"http://evil.example:{port}/"
    return seen


def test_a_rebinding_page_can_neither_read_nor_operate_the_console(
        tmp_path: Path, console_db: Database, client: jobwarden.Client,
        sock: socket.socket) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    seen = _attack(tmp_path, console_db, sock, ConsoleSettings(port=sock.getsockname()[1]))
    assert seen == {"read": 421, "sawQueue": False, "token": False, "post": 421}
    assert {q.queue: q.paused for q in client.queues()} == {"mail": False}


def test_the_same_page_succeeds_where_the_name_is_allowed(
        tmp_path: Path, console_db: Database, client: jobwarden.Client,
        sock: socket.socket) -> None:
    client.enqueue(testjobs.Record, queue="mail")
    trusting = ConsoleSettings(port=sock.getsockname()[1], allowed_hosts=("evil.example",))
    seen = _attack(tmp_path, console_db, sock, trusting)
    assert seen == {"read": 200, "sawQueue": True, "token": True, "post": 303}
    assert {q.queue: q.paused for q in client.queues()} == {"mail": True}
