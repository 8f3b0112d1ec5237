"""Named SQL queries loaded from ``sql/*.sql`` and rendered for one schema.

Why files and not f-strings: the SQL is reviewable as SQL, each query has a
name that shows up in logs, and the only dynamic part (the schema name) goes
through ``psycopg.sql.Identifier`` exactly once, at load time.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from typing import LiteralString

from psycopg import sql

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a ``.sql`` file into ``{name: query}`` on ``-- name: X`` headers."""
    matches = list(_HEADER.finditer(text))
    queries: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group("name")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body
    return queries


def _literal(text: str) -> LiteralString:
    # The text comes from the package's own .sql files, never from user input.
    return text


def render(text: str, schema: str) -> str:
    """Substitute ``{schema}`` with the quoted identifier; doubled braces become literal."""
    composed = sql.SQL(_literal(text)).format(schema=sql.Identifier(schema))
    return composed.as_string(None)


@functools.cache
def _raw() -> dict[str, str]:
    queries: dict[str, str] = {}
    folder = importlib.resources.files("jobwarden.db") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in parse(entry.read_text(encoding="utf-8")).items():
                if name in queries:
                    raise ValueError(f"query {name!r} is defined in two files")
                queries[name] = body
    return queries


#: Named queries with this prefix are pieces, not statements: other queries in any
#: file include one as ``{fragment_name}``, so a shared clause is written once.
FRAGMENT = "fragment_"


@functools.cache
def for_schema(schema: str) -> dict[str, str]:
    """All named queries rendered for ``schema`` (cached per schema), fragments included."""
    raw = _raw()
    pieces = {name: sql.SQL(_literal(render(body, schema)))
              for name, body in raw.items() if name.startswith(FRAGMENT)}
    return {
        name: sql.SQL(_literal(body)).format(schema=sql.Identifier(schema), **pieces)
        .as_string(None)
        for name, body in raw.items() if not name.startswith(FRAGMENT)
    }
