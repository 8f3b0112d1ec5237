"""Which named queries a Database runs: round trips and statement choices, observed."""

from __future__ import annotations

import pytest

from jobwarden.db.database import Database


def counting(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the named queries ``db`` runs through ``rows`` from now on."""
    calls: list[str] = []
    original = db.rows

    def counted(name: str, *args: object, **kwargs: object) -> object:
        calls.append(name)
        return original(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "rows", counted)
    return calls
