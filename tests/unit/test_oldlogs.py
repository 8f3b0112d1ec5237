"""The upgrade tests hold every line of a previous-release pod's log against them, but for
the tracebacks 0.1.0's HTTP server prints for clients that went away (tests/support/oldlogs):
those are recognised even when several are printed at once, interleaved down to pieces of a
line (probes timing out together on a loaded machine; stop 34's CI failed on such a log),
and nothing else is taken for one."""

from __future__ import annotations

import itertools
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.oldlogs import old_release_log

LIB = "/usr/lib/python3.11"
SITE = "/venv/lib/python3.11/site-packages/jobwarden"
RECORD = '{"time": "2026-12-02T11:35:17.338Z", "level": "INFO", "message": "pass"}\n'
RESET = "ConnectionResetError: [Errno 104] Connection reset by peer\n"
OWN_FRAME = f'  File "{SITE}/health.py", line 53, in _send\n    self.end_headers()\n'


def gone_client(port: int, error: str = RESET, frame: str = OWN_FRAME) -> list[str]:
    """The writes socketserver makes for one such client (0.1.0's frames, paths shortened):
    print() writes its arguments, separators and newline apart; traceback a frame whole."""
    return [
        "-" * 40, "\n",
        "Exception occurred during processing of request from", " ", f"('127.0.0.1', {port})",
        "\n",
        "Traceback (most recent call last):\n",
        f'  File "{LIB}/socketserver.py", line 691, in process_request_thread\n'
        "    self.finish_request(request, client_address)\n",
        f'  File "{LIB}/http/server.py", line 424, in handle_one_request\n    method()\n',
        frame,
        f'  File "{LIB}/socketserver.py", line 834, in write\n    self._sock.sendall(b)\n'
        "    ^^^^^^^^^^^^^^^^^^^^\n",
        error,
        "-" * 40, "\n",
    ]


def interleaved(*writers: list[str]) -> str:
    """What threads writing at once leave: their writes taken in turn."""
    return "".join(w for group in itertools.zip_longest(*writers) for w in group if w)


def test_gone_client_tracebacks_are_taken_out_even_interleaved_within_lines() -> None:
    log = "".join([RECORD, *gone_client(1), RECORD, interleaved(
        gone_client(2), gone_client(3, "BrokenPipeError: [Errno 32] Broken pipe\n"),
        [RECORD]), RECORD])
    assert "fromException" in log                              # pieces of lines interleaved
    assert old_release_log(log) == ([RECORD.strip()] * 4, 3)


def test_any_other_traceback_keeps_every_printed_line() -> None:
    other = ["Traceback (most recent call last):\n",
             f'  File "{SITE}/worker/claiming.py", line 10, in claim\n    raise ValueError\n',
             "ValueError: boom\n"]
    foreign = f'  File "{SITE}/worker/claiming.py", line 1, in claim\n    claim()\n'
    for writes in (
            [*gone_client(1), *other],                               # a traceback of its own
            [interleaved(gone_client(1), other)],                    # ... printed among one
            [*gone_client(1), *gone_client(2, "ValueError: boom\n")],  # another error
            [interleaved(gone_client(1), gone_client(2, frame=foreign))],  # a frame elsewhere
            gone_client(1)[:-3]):                                    # a block cut short
        log = RECORD + "".join(writes)
        assert old_release_log(log) == (log.splitlines(), 0)


ROUNDS = 20
SERVER = """
import http.server, sys, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.05)                                # the client is gone by now
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    def shutdown_request(self, request):               # after the traceback is printed
        super().shutdown_request(request)
        print("done", flush=True)
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_what_pythons_http_server_prints_for_gone_clients_is_all_taken_out(
        tmp_path: Path) -> None:
    """The real thing: a ThreadingHTTPServer (what 0.1.0's health.py is, at that path)
    answering clients that reset their connections, three at a time."""
    (tmp_path / "jobwarden").mkdir()
    (tmp_path / "jobwarden" / "health.py").write_text(SERVER)
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:
        server = subprocess.Popen([sys.executable, str(tmp_path / "jobwarden" / "health.py")],
                                  stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())

        def reset() -> None:
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

        for _ in range(ROUNDS):
            clients = [threading.Thread(target=reset) for _ in range(3)]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
        done = 0
        while done < 3 * ROUNDS:                       # every request answered, or failed
            line = server.stdout.readline()
            assert line, "the server exited"
            done += line.count("done")
    finally:
        server.terminate()
        server.communicate(timeout=60)
    printed = stderr.read_text()
    blocks = printed.count("Exception occurred during processing of request from")
    assert blocks > 0
    assert old_release_log(printed) == ([], blocks)
