"""Rows and answers of the leases table, as frozen dataclasses, and the naming rules.

The rules (how a long name is stored, what a valid ttl is) are domain rules, not
storage: the lock API, exclusive jobs, schedules and the operator all name leases
with :func:`lease_name`, and the database layer applies the same function.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any

#: The column's limit (CHECK in 0002_leases.sql); longer names are hashed.
MAX_NAME_LENGTH = 200
_DIGEST_LENGTH = 64  # sha256, hex
#: Leases Jobwarden takes for its own loops (``jobwarden:gauges``, ``operator:<loop>``,
#: ``maintenance:retention``): ``leases list`` shows them only with ``--all``.
INTERNAL_PREFIXES = ("jobwarden:", "operator:", "maintenance:")


def is_internal(name: str) -> bool:
    """A lease of Jobwarden's own machinery, not one a user's code or job takes."""
    return name.startswith(INTERNAL_PREFIXES)


def lease_name(raw: str) -> str:
    """The stored name: ``raw`` itself, or a readable prefix + ``#`` + its sha256.

    Deterministic, so every process maps a long name to the same row, and
    idempotent (a hashed name is exactly the limit long and maps to itself).
    """
    if not raw:
        raise ValueError("a lease name must not be empty")
    if len(raw) <= MAX_NAME_LENGTH:
        return raw
    # Here, not at the top: a worker whose lease names fit never loads it.
    from jobwarden.structs.digests import sha256_hex

    return f"{raw[:MAX_NAME_LENGTH - _DIGEST_LENGTH - 1]}#{sha256_hex(raw)}"


def check_ttl(ttl_seconds: float) -> float:
    """A lease ttl: a positive, finite number of seconds (ValueError otherwise)."""
    ttl = float(ttl_seconds)
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"a lease ttl must be a positive number of seconds, not {ttl_seconds!r}")
    return ttl


@dataclasses.dataclass(frozen=True, kw_only=True)
class Acquisition:
    """The answer to one acquire attempt.

    ``acquired``: this caller now holds ``slot`` of ``name`` with ``token`` until
    ``expires_at``. Otherwise the lease is busy: ``holder``/``holder_host`` hold
    it (when the database could say) and it may free up in ``retry_after``
    seconds (its holder's expiry, database clock; the holder may still renew).
    """

    acquired: bool
    name: str
    slot: int
    token: int | None
    expires_at: datetime.datetime | None
    #: Seconds until expiry (ours when acquired, the holder's when busy).
    remaining_seconds: float
    holder: str | None = None
    holder_host: str | None = None

    @property
    def retry_after(self) -> float:
        return 0.0 if self.acquired else max(self.remaining_seconds, 0.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """One (name, slot) row as stored; ``owner`` None means free."""

    name: str
    slot: int
    owner: str | None
    holder_host: str | None
    token: int
    acquired_at: datetime.datetime | None
    expires_at: datetime.datetime | None
    #: Seconds until expiry on the database clock (negative once lapsed; None when free).
    expires_in_seconds: float | None

    @property
    def held(self) -> bool:
        """Held and not lapsed (a lapsed lease is free for the next acquirer)."""
        return self.owner is not None and (self.expires_in_seconds or 0.0) > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "slot": self.slot, "owner": self.owner,
            "holder_host": self.holder_host, "token": self.token,
            "acquired_at": self.acquired_at.isoformat() if self.acquired_at else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "expires_in_seconds": None if self.expires_in_seconds is None
            else round(self.expires_in_seconds, 3),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Renewal:
    """A successful renewal: the new expiry and the seconds to it (database clock)."""

    expires_at: datetime.datetime
    remaining_seconds: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeldLease:
    """What a batch renewal needs to know about one lease a worker holds."""

    name: str
    slot: int
    owner: str
    token: int
    ttl_seconds: float
