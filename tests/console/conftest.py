"""Console fixtures: the ASGI app over a fresh database, driven in-process or served."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("starlette", reason="the console extra is not installed: "
                    "pip install -e '.[test]' (jobwarden[console])")

from starlette.testclient import TestClient

import jobwarden
from jobwarden.console.app import build_app
from jobwarden.console.settings import ConsoleSettings
from jobwarden.db.database import Database

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@pytest.fixture
def console_db(dsn: str) -> Iterator[Database]:
    database = Database(dsn, min_size=1, max_size=6, prepare_threshold=None)
    yield database
    database.close()


@pytest.fixture
def make_console(console_db: Database) -> Callable[..., TestClient]:
    def make(**overrides: object) -> TestClient:
        settings = ConsoleSettings(**overrides)  # type: ignore[arg-type]
        app = build_app(jobwarden.Client(database=console_db), settings)
        return TestClient(app, base_url="http://127.0.0.1:8787")
    return make


@pytest.fixture
def console(make_console: Callable[..., TestClient]) -> TestClient:
    return make_console()


def csrf_of(http: TestClient, path: str = "/jobs") -> str:
    """The CSRF token a page hands this client's session."""
    page = http.get(path)
    found = CSRF.search(page.text)
    assert found, page.text[:500]
    return found.group(1)
