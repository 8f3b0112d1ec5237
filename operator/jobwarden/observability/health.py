"""The HTTP endpoints of a worker or the operator: /metrics, /healthz, /readyz, and routes.

Not part of the worker package: the operator serves the same endpoints, and it
must not import worker internals to do so. A worker adds its extensions' routes
(the tick route).

A tiny threaded server from the standard library: probes and scrapes are a few
requests per second, and it must keep answering while every job slot is busy,
so it runs on its own thread and never touches the job slots.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from jobwarden.observability import metrics

logger = logging.getLogger("jobwarden.http")

#: A route handler gets (method, path, query, headers, body) and returns (status, json body).
Handler = Callable[[str, str, str, dict[str, str], bytes], tuple[int, dict[str, Any]]]


class HealthServer:
    def __init__(self, *, host: str, port: int, ready: Callable[[], tuple[bool, str]],
                 healthy: Callable[[], tuple[bool, str]],
                 routes: Mapping[str, Handler] | None = None) -> None:
        # Imported here, not with the module: a worker without http_port never builds a
        # server, and http.server (with email, mimetypes, socketserver) and
        # prometheus_client's exposition are 1-3 MiB of an idle worker's memory.
        import http.server

        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.routes: dict[str, Handler] = dict(routes or {})
        server = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            server_version = "jobwarden"
            sys_version = ""

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("%s - %s", self.address_string(), format % args)

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                self._send(status, json.dumps(payload).encode(), "application/json")

            def _dispatch(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/metrics" and self.command in ("GET", "HEAD"):
                    self._send(200, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST)
                    return
                if path in ("/healthz", "/readyz") and self.command in ("GET", "HEAD"):
                    ok, why = (healthy if path == "/healthz" else ready)()
                    self._json(200 if ok else 503, {"ok": ok, "status": why})
                    return
                route = server.routes.get(path)
                if route is None:
                    self._json(404, {"ok": False, "error": "not found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 65536)) if length > 0 else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload = route(self.command, path, query, headers, body)
                self._json(status, payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch

        class _Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # The standard library prints a traceback to stderr. A client that went
                # away (a probe past its timeoutSeconds, a scrape cut short) is its own
                # business: one DEBUG line. Anything else is ours: an ERROR, in the log.
                error = sys.exc_info()[1]
                if isinstance(error, ConnectionError):
                    logger.debug("%s went away before its answer: %r",
                                 client_address[0], error)
                else:
                    logger.exception("a request from %s failed", client_address[0])

        self._server = _Server((host, port), _Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="jobwarden-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
