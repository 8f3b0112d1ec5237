"""A TCP relay to PostgreSQL that can go silent, for the silent-database tests.

What a hung PgBouncer, a stuck proxy or load balancer, a dead NAT entry or a
partition looks like to a client: the TCP connection stays open (the relay's
kernel still acknowledges every packet) but nothing ever answers. ``silence()``
makes every connection open at that moment swallow what either side sends, for
good, and every connection accepted while silent too; ``resume()`` forwards
only connections accepted from then on (the old ones stay dead, as after a real
partition or a failover).

One selector thread; upstream is the server's Unix socket or a TCP address.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from pathlib import Path

from psycopg import conninfo


class _Link:
    __slots__ = ("client", "dead", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket | None,
                 dead: bool) -> None:
        self.client = client
        self.upstream = upstream
        self.dead = dead


class SilentRelay:
    """Relays ``127.0.0.1:<port>`` (or ``listen_host``) to the server of ``dsn``."""

    def __init__(self, dsn: str, *, listen_host: str = "127.0.0.1") -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        self._upstream: str | tuple[str, int] = (
            str(Path(host) / f".s.PGSQL.{port}") if host.startswith("/") else (host, port))
        self._dsn_params = params
        self._listener = socket.create_server((listen_host, 0))
        self._listener.setblocking(False)
        self.host = listen_host
        self.port = int(self._listener.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._silent = False
        self._closing = False
        #: Bytes swallowed since the first silence (tests assert the relay saw traffic).
        self.swallowed = 0
        self._thread = threading.Thread(target=self._run, name="silent-relay", daemon=True)
        self._thread.start()

    @property
    def dsn(self) -> str:
        """The DSN of the database through this relay."""
        params = {**self._dsn_params, "host": self.host, "port": str(self.port)}
        return conninfo.make_conninfo("", **params)

    def silence(self) -> None:
        """Swallow everything on every open connection, and on new ones, from now on."""
        with self._lock:
            self._silent = True
            for link in self._links:
                link.dead = True

    def resume(self) -> None:
        """Forward connections accepted from now on (those open stay silent)."""
        with self._lock:
            self._silent = False

    @property
    def open_links(self) -> int:
        with self._lock:
            return sum(1 for link in self._links if not link.dead)

    def close(self) -> None:
        self._closing = True
        self._thread.join(timeout=5)
        with self._lock:
            for link in self._links:
                for sock in (link.client, link.upstream):
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.close()
        self._listener.close()
        self._selector.close()

    def __enter__(self) -> SilentRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing:
            for key, _events in self._selector.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                else:
                    link, side = key.data
                    self._pump(link, side)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        with self._lock:
            silent = self._silent
        upstream: socket.socket | None = None
        if not silent:
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                return
        link = _Link(client, upstream, dead=silent)
        with self._lock:
            self._links.append(link)
        self._selector.register(client, selectors.EVENT_READ, (link, "client"))
        if upstream is not None:
            self._selector.register(upstream, selectors.EVENT_READ, (link, "upstream"))

    def _connect(self) -> socket.socket:
        if isinstance(self._upstream, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._upstream)
            return sock
        return socket.create_connection(self._upstream)

    def _pump(self, link: _Link, side: str) -> None:
        source = link.client if side == "client" else link.upstream
        target = link.upstream if side == "client" else link.client
        if source is None or source.fileno() == -1:
            return  # closed earlier in this round of events (its peer's close)
        try:
            data = source.recv(65536)
        except OSError:
            data = b""
        if not data:
            # A side closed: a live link closes the other; a dead one keeps it open
            # (the point: the peer sees nothing, not even a close).
            self._forget(source)
            if not link.dead and target is not None:
                self._forget(target)
            return
        if link.dead or target is None:
            self.swallowed += len(data)
            return
        try:
            target.sendall(data)
        except OSError:
            link.dead = True

    def _forget(self, sock: socket.socket) -> None:
        if sock.fileno() != -1:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
