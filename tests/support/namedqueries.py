"""Which named queries a Database runs: round trips and statement choices, observed."""

from __future__ import annotations

import pytest

from jobwarden.db.database import Database


def counting(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the named queries ``db`` runs through ``rows`` (``row`` too) and
    ``execute`` from now on, in order."""
    calls: list[str] = []
    for method in ("rows", "execute"):
        original = getattr(db, method)

        def counted(name: str, *args: object, _original: object = original,
                    **kwargs: object) -> object:
            calls.append(name)
            return _original(name, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(db, method, counted)
    return calls
