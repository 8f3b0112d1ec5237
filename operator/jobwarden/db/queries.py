"""Named SQL queries loaded from ``sql/*.sql`` and rendered for one schema.

Why files and not f-strings: the SQL is reviewable as SQL, each query has a
name that shows up in logs, and the only dynamic part (the schema name) goes
through ``psycopg.sql.Identifier`` exactly once, at load time.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

from psycopg import sql

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

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
    # The package's own folder when it is one (always, installed or checked out):
    # importlib.resources would load its file readers for the same files (~40 KiB
    # resident in every process; docs/benchmarks.md, "Idle worker RSS").
    folder: Traversable = Path(__file__).with_name("sql")
    if not folder.is_dir():  # a package not on a file system (a zip import)
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


class Rendered(dict[str, str]):
    """The named queries of one schema, each rendered on its first lookup.

    Why lazily: a process runs a fraction of the ~120 queries (an idle worker about
    fifteen), and rendering all of them at start-up kept a second copy of every text
    resident (docs/benchmarks.md, "Idle worker RSS"). A lookup after the first is a
    plain dict hit. Only names looked up are keys: ask :meth:`complete` for all.
    """

    def __init__(self, schema: str) -> None:
        super().__init__()
        self.schema = schema
        self._pieces: dict[str, sql.SQL] | None = None

    def __missing__(self, name: str) -> str:
        body = _raw().get(name)
        if body is None or name.startswith(FRAGMENT):
            raise KeyError(name)
        if self._pieces is None:
            self._pieces = {piece: sql.SQL(_literal(render(text, self.schema)))
                            for piece, text in _raw().items() if piece.startswith(FRAGMENT)}
        text = sql.SQL(_literal(body)).format(schema=sql.Identifier(self.schema),
                                              **self._pieces).as_string(None)
        self[name] = text  # two threads may render one name: the same text either way
        return text

    def complete(self) -> Rendered:
        """Every named query rendered (tests, tools that list them); returns self."""
        for name in _raw():
            if not name.startswith(FRAGMENT):
                self[name]  # renders it (a lookup of a missing key)
        return self


@functools.cache
def for_schema(schema: str) -> Rendered:
    """The named queries of ``schema`` (one per schema), rendered as they are looked up."""
    return Rendered(schema)
