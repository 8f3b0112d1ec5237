"""The process kubelet's HTTPS endpoint: container logs, as the API server asks for them.

``kubectl logs`` (and ``helm test --logs``) ask the API server for
``pods/<name>/log``; the API server proxies that to the node's kubelet at
``https://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/<namespace>/<pod>/<container>``,
checking the kubelet's certificate against ``--kubelet-certificate-authority`` and
showing its own client certificate (tests/cluster/controlplane.py). This server is
that endpoint for the processes the kubelet runs: their output file, whole or its
``tailLines``/``limitBytes``, and with ``follow`` it keeps sending what the process
writes until it exits. Only clients with a certificate of the plane's CA are served.
"""

from __future__ import annotations

import http.server
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: (namespace, pod, container) -> the process's log file and whether it still runs; None
#: when this node runs no such container.
Find = Callable[[str, str, str], "tuple[Path, Callable[[], bool]] | None"]


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class KubeletServer:
    def __init__(self, find: Find, *, cert: Path, key: Path, client_ca: Path) -> None:
        self.find = find
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(str(client_ca))
        self._stopping = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                parts = url.path.strip("/").split("/")
                if url.path == "/healthz":
                    self._plain(200, b"ok")
                    return
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self._plain(404, b"404 page not found\n")
                    return
                _, namespace, pod, container = parts
                found = server.find(namespace, pod, container)
                if found is None:
                    self._plain(404, f"container {container} is not valid for pod {pod} "
                                     f"in namespace {namespace}\n".encode())
                    return
                log, running = found
                data = log.read_bytes() if log.exists() else b""
                sent = len(data)
                if "tailLines" in query:
                    data = _tail(data, int(query["tailLines"][0]))
                limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
                if limit is not None:
                    data = data[:limit]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                if query.get("follow", ["false"])[0] != "true" or limit is not None:
                    return
                while not server._stopping.is_set():
                    with open(log, "rb") as handle:
                        handle.seek(sent)
                        more = handle.read()
                    if more:
                        sent += len(more)
                        self.wfile.write(more)
                        self.wfile.flush()
                    elif not running():
                        return
                    else:
                        time.sleep(0.2)

            def _plain(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet-https",
                                        daemon=True)

    def start(self) -> KubeletServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)
