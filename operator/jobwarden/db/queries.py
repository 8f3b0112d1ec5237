"""Named SQL queries loaded from ``sql/*.sql`` and rendered for one schema.

Why files and not f-strings: the SQL is reviewable as SQL, each query has a
name that shows up in logs, and the only dynamic part (the schema name) goes
through ``psycopg.sql.Identifier`` exactly once, at load time.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

from psycopg import sql

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_HEADER = re.compile(rb"^-- name: (?P<name>[a-z_][a-z0-9_]*)[ \t\r]*$", re.MULTILINE)


def _spans(data: bytes) -> Iterator[tuple[str, int, int, int]]:
    """Each named query of a ``.sql`` file's bytes: its name, where its header starts,
    where its text starts and where it ends (the next header, or the end)."""
    matches = list(_HEADER.finditer(data))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(data)
        yield match.group("name").decode(), match.start(), match.end(), end


def parse(text: str) -> dict[str, str]:
    """Split a ``.sql`` file into ``{name: query}`` on ``-- name: X`` headers."""
    data = text.encode()
    queries: dict[str, str] = {}
    for name, _header, start, end in _spans(data):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = data[start:end].decode().strip()
    return queries


def _literal(text: str) -> LiteralString:
    # The text comes from the package's own .sql files, never from user input.
    return text


def render(text: str, schema: str) -> str:
    """Substitute ``{schema}`` with the quoted identifier; doubled braces become literal."""
    composed = sql.SQL(_literal(text)).format(schema=sql.Identifier(schema))
    return composed.as_string(None)


@functools.cache
def _folder() -> Traversable:
    # The package's own folder when it is one (always, installed or checked out):
    # importlib.resources would load its file readers for the same files (~40 KiB
    # resident in every process; docs/benchmarks.md, "Idle worker RSS").
    folder: Traversable = Path(__file__).with_name("sql")
    if not folder.is_dir():  # a package not on a file system (a zip import)
        folder = importlib.resources.files("jobwarden.db") / "sql"
    return folder


@functools.cache
def _index() -> dict[str, tuple[str, int, int]]:
    """Where each named query is: ``{name: (file name, its header's first byte, end)}``.

    Why not the texts themselves: a process runs a fraction of the ~150 queries
    (an idle worker about fifteen), and holding every text kept ~125 KiB of SQL
    resident in every process (docs/benchmarks.md, "Renovation, no regression
    (issue 29)"). A query's text is read from its file when it is first rendered:
    its bytes only, not the whole file.
    """
    index: dict[str, tuple[str, int, int]] = {}
    for entry in sorted(_folder().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            file = entry.name
            seen: set[str] = set()
            for name, header, _start, end in _spans(entry.read_bytes()):
                if name in seen:
                    raise ValueError(f"query {name!r} is defined twice")
                if name in index:
                    raise ValueError(f"query {name!r} is defined in two files")
                seen.add(name)
                index[name] = (file, header, end)
    return index


_NEXT = b"-- name: "


def _text(name: str) -> str | None:
    """The named query's text as its file has it, or None for an unknown name.

    The bytes read must still be the query's: its own header first, the next one
    (or the end of the file) right after. A file replaced since it was indexed (a
    package upgraded under a running process) is parsed whole instead, so a query
    is never read from the wrong bytes.
    """
    found = _index().get(name)
    if found is None:
        return None
    file, header, end = found
    with (_folder() / file).open("rb") as stream:
        stream.seek(header)
        chunk = stream.read(end - header + len(_NEXT))
    matched = _HEADER.match(chunk)
    if matched is None or matched.group("name").decode() != name or \
            chunk[end - header:] not in (b"", _NEXT):
        return parse((_folder() / file).read_text(encoding="utf-8")).get(name)
    return chunk[matched.end():end - header].decode().strip()


#: Named queries with this prefix are pieces, not statements: other queries in any
#: file include one as ``{fragment_name}``, so a shared clause is written once.
FRAGMENT = "fragment_"
_PIECE = re.compile(r"(?<!\{)\{(fragment_[a-z0-9_]+)\}(?!\})")


class Rendered(dict[str, str]):
    """The named queries of one schema, each rendered on its first lookup.

    Why lazily: a process runs a fraction of the ~150 queries (an idle worker about
    fifteen), and rendering all of them at start-up kept a second copy of every text
    resident (docs/benchmarks.md, "Idle worker RSS"). A lookup after the first is a
    plain dict hit. Only names looked up are keys: ask :meth:`complete` for all.
    Fragments too are rendered when a query first names one.
    """

    def __init__(self, schema: str) -> None:
        super().__init__()
        self.schema = schema
        self._pieces: dict[str, sql.SQL] = {}

    def __missing__(self, name: str) -> str:
        body = None if name.startswith(FRAGMENT) else _text(name)
        if body is None:
            raise KeyError(name)
        pieces = {piece: self._piece(piece) for piece in _PIECE.findall(body)}
        text = sql.SQL(_literal(body)).format(schema=sql.Identifier(self.schema),
                                              **pieces).as_string(None)
        self[name] = text  # two threads may render one name: the same text either way
        return text

    def _piece(self, name: str) -> sql.SQL:
        piece = self._pieces.get(name)
        if piece is None:
            text = _text(name)
            if text is None:
                raise KeyError(name)
            piece = self._pieces[name] = sql.SQL(_literal(render(text, self.schema)))
        return piece

    def complete(self) -> Rendered:
        """Every named query rendered (tests, tools that list them); returns self."""
        for name in _index():
            if not name.startswith(FRAGMENT):
                self[name]  # renders it (a lookup of a missing key)
        return self


@functools.cache
def for_schema(schema: str) -> Rendered:
    """The named queries of ``schema`` (one per schema), rendered as they are looked up."""
    return Rendered(schema)
