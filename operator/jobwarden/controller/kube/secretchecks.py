"""Does a DSN Secret (and its key) exist? Read at most once a minute per Secret.

Why shared and cached: a pod-run JobSchedule whose DSN Secret is missing is not
Ready (its run pods would sit in CreateContainerConfigError), so its pass asks.
Many schedules name one Secret; asking the API server per schedule and pass
would be a polling loop that grows with the number of schedules. Here the
answer is kept per (namespace, Secret): one GET a minute while it exists, one
every 5 s while it is missing (so it is seen soon after it is created), however
many schedules name it. Only the keys are read, never the values.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

#: Seconds an answer is kept: a Secret found, a Secret (or key) missing.
FOUND_SECONDS = 60.0
MISSING_SECONDS = 5.0


class SecretReader(Protocol):
    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None: ...


class SecretChecks:
    """``problem(namespace, secret, key)``: None when usable, else (reason, message)."""

    def __init__(self, reader: SecretReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, frozenset[str] | str | None]] = {}

    def problem(self, namespace: str, secret: str, key: str) -> tuple[str, str] | None:
        keys = self._keys(namespace, secret)
        ref = f"Secret {namespace}/{secret}"
        if isinstance(keys, str):  # not allowed to read it: say nothing (Unknown)
            return None
        if keys is None:
            return ("SecretNotFound", f"{ref} (spec.dsnSecretRef) does not exist; the run "
                                      "pods cannot start until it does")
        if key not in keys:
            return ("KeyNotFound", f"{ref} has no key {key!r} (spec.dsnSecretRef.key); the "
                                   "run pods cannot start until it does")
        return None

    def _keys(self, namespace: str, secret: str) -> frozenset[str] | str | None:
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get((namespace, secret))
        if seen is not None:
            ttl = FOUND_SECONDS if isinstance(seen[1], frozenset) else MISSING_SECONDS
            if now - seen[0] < ttl:
                return seen[1]
        found: frozenset[str] | str | None
        try:
            found = self.reader.secret_keys(namespace, secret)
        except PermissionError as exc:
            found = f"forbidden: {exc}"
        with self._lock:
            self._seen[(namespace, secret)] = (now, found)
        return found
