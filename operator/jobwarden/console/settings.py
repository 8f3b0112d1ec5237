"""Console settings, with the safety rules checked once at startup."""

from __future__ import annotations

import dataclasses
import ipaddress
import secrets

from jobwarden import errors

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    """How the console listens and what it lets people do.

    ``token``: required unless ``host`` is a loopback address; sent as
    ``Authorization: Bearer <token>`` or as the password of HTTP basic auth (any
    user name), so a browser's own login prompt works. ``read_only``: no action
    is shown and every POST is refused. ``secret``: keys the CSRF tokens (random
    per process by default: a restart invalidates open forms, nothing else).
    """

    host: str = "127.0.0.1"
    port: int = 8787
    token: str | None = None
    read_only: bool = False
    refresh_seconds: float = 3.0
    page_size: int = 50
    secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))

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
        return self
