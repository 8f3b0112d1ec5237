"""Hex digests of text, with :mod:`hashlib` imported on the first call.

Why a module of its own: ``import hashlib`` loads OpenSSL's ``_hashlib`` and
touches about 0.6 MiB of libcrypto, which every worker used to pay at start-up
for digests that only some paths take (a schedule definition's hash, a run-now
key, a lease name longer than the column, ``structs/leases.py``). The prepared
claim's statement names, on the hot path, use zlib checksums instead
(``db/prepared.py``). Measured in docs/benchmarks.md, "Idle worker RSS" (fifth
round); ``tests/worker/test_idle_worker.py`` checks that an idle worker has not
imported hashlib.
"""

from __future__ import annotations

__all__ = ["sha256_hex"]


def sha256_hex(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8), as 64 hex digits."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()

