"""Console settings, with the safety rules checked once at startup."""

from __future__ import annotations

import dataclasses
import ipaddress
import secrets

from jobwarden import errors

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


#: Names every local console answers to (with any port), besides its bound address.
LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(address: str) -> str:
    """How ``address`` appears in a Host header: lower case, an IPv6 address in brackets."""
    text = address.strip().lower()
    if ":" in text and not text.startswith("["):
        return f"[{text}]"
    return text


def split_host_header(value: str) -> tuple[str, str | None]:
    """A Host header (``name``, ``name:port``, ``[v6]:port``) as (name, port or None)."""
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return text, None
        rest = text[end + 1:]
        return text[:end + 1], rest[1:] if rest.startswith(":") else None
    name, colon, port = text.rpartition(":")
    if colon and port.isdigit():
        return name, port
    return text, None


def check_allowed_host(entry: str) -> str:
    """An ``--allowed-host`` entry: a host name or address, optionally with ``:port``."""
    text = entry.strip()
    if not text or any(c.isspace() or c in "/@?#,*" for c in text):
        raise errors.ConfigurationError(
            f"--allowed-host {entry[:60]!r} is not a host name (e.g. console.internal "
            "or console.internal:8787)")
    name, port = split_host_header(text)
    return host_name(name) + (f":{port}" if port else "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    """How the console listens and what it lets people do.

    ``token``: required unless ``host`` is a loopback address; sent as
    ``Authorization: Bearer <token>`` or as the password of HTTP basic auth (any
    user name), so a browser's own login prompt works. ``read_only``: no action
    is shown and every POST is refused. ``secret``: keys the CSRF tokens (random
    per process by default: a restart invalidates open forms, nothing else).
    ``allowed_hosts``: the ``Host`` names the console answers to besides its bound
    address, ``localhost``, ``127.0.0.1`` and ``[::1]`` (a name alone allows any
    port, ``name:port`` that port only). Every other Host is refused before
    anything else (DNS rebinding: a page on ``evil.example`` that resolves to
    127.0.0.1 sends ``Host: evil.example``). With a token and no allowed hosts
    given, any Host is served (the token is what protects a remote console: a
    rebinding page has no credentials for the console's origin).
    """

    host: str = "127.0.0.1"
    port: int = 8787
    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = 3.0
    page_size: int = 50
    secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))
    allowed_hosts: tuple[str, ...] = ()

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header may be served at all."""
        if self.token is not None and not self.allowed_hosts:
            return True
        if not header:
            return False
        name, port = split_host_header(header)
        if name in LOCAL_HOST_NAMES or name == host_name(self.host):
            return True
        for entry in self.allowed_hosts:
            allowed, allowed_port = split_host_header(check_allowed_host(entry))
            if allowed == name and allowed_port in (None, port):
                return True
        return False

    def check(self) -> ConsoleSettings:
        if not is_loopback(self.host) and not self.token:
            raise errors.ConfigurationError(
                f"the console would listen on {self.host} without authentication: set "
                "JOBWARDEN_CONSOLE_TOKEN (or --token-file), or bind to 127.0.0.1")
        if self.token is not None and len(self.token) < 16:
            raise errors.ConfigurationError("the console token must be at least 16 characters")
        if not 0 < self.port < 65536:
            raise errors.ConfigurationError(f"invalid port {self.port}")
        if not 0.5 <= self.refresh_seconds <= 3600:
            raise errors.ConfigurationError("--refresh must be between 0.5 and 3600 seconds")
        for entry in self.allowed_hosts:
            check_allowed_host(entry)
        return self
