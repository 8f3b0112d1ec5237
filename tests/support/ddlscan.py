"""Find the statements in migrations that remove or change an object (docs/upgrades.md).

What counts as destructive: anything after which a statement of the previous
release that used the object can fail or mean something else --

* ``DROP <kind> name[, name ...]`` (function, procedure, table, view, type, index,
  sequence, trigger, domain, schema, ...: every object named), and in ``ALTER
  TABLE``: ``DROP COLUMN``, ``DROP CONSTRAINT``, ``ALTER COLUMN ... TYPE``,
  ``ALTER COLUMN ... SET NOT NULL``, ``ALTER COLUMN ... DROP DEFAULT``, and ``ADD
  COLUMN`` of a ``NOT NULL`` (or ``PRIMARY KEY``) column with no default, identity
  or generated value (the previous release's ``INSERT``s do not name it);
* ``RENAME`` of anything (``RENAME TO``, ``RENAME COLUMN``, ``RENAME
  CONSTRAINT``, ``RENAME VALUE``);
* ``ALTER TYPE ... DROP ATTRIBUTE`` / ``ALTER ATTRIBUTE ... TYPE``;
* ``CREATE OR REPLACE FUNCTION name(args)`` (or ``CREATE FUNCTION``) where an
  earlier migration created ``name`` with other arguments: an overload beside the
  old function makes a call that relied on defaults or untyped literals ambiguous
  ("function ... is not unique"), and a changed argument list is how a signature
  change is usually spelt.

A scanner, not a parser: comments and dollar-quoted bodies are removed, the rest
is split at semicolons and matched case-insensitively. It reports each object as
``"<kind> <name>"`` (``column table.column``, ``constraint table.name``, names
without their ``{schema}.`` prefix), the same spelling an entry in
``contractions.toml`` uses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator

_LINE_COMMENT = re.compile(r"--[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_DOLLAR = re.compile(r"\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$", re.DOTALL)
_QUOTED = re.compile(r"'(?:[^']|'')*'")
_NAME = r"(?:\{schema\}\.)?\"?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\"?"

_DROP = re.compile(
    r"^DROP\s+(?P<kind>FUNCTION|PROCEDURE|AGGREGATE|TABLE|MATERIALIZED\s+VIEW|VIEW|TYPE|"
    r"DOMAIN|INDEX(?:\s+CONCURRENTLY)?|SEQUENCE|TRIGGER|SCHEMA|EXTENSION|POLICY|RULE|"
    r"OPERATOR|CAST)\s+(?:IF\s+EXISTS\s+)?(?P<names>.*)", re.IGNORECASE | re.DOTALL)
_LEADING_NAME = re.compile(_NAME)
#: A comma outside parentheses: between the objects of a DROP, the actions of an ALTER TABLE.
_TOP_COMMA = re.compile(r",(?![^()]*\))")
_ADD_COLUMN = re.compile(
    r"^\s*ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?\"?(?P<part>\w+)\"?\s+(?P<rest>.*)",
    re.IGNORECASE | re.DOTALL)
#: What follows ADD in a table constraint, not a column (ADD CONSTRAINT, ADD UNIQUE ...).
_NOT_A_COLUMN = frozenset({"constraint", "primary", "unique", "check", "foreign", "exclude"})
#: Column definitions whose rows always get a value without the INSERT naming the column.
_FILLED = re.compile(r"\bDEFAULT\b|\bGENERATED\b|^\s*(?:small|big)?serial\d?\b",
                     re.IGNORECASE)
_REQUIRED = re.compile(r"\bNOT\s+NULL\b|\bPRIMARY\s+KEY\b", re.IGNORECASE)
_ALTER_TABLE = re.compile(r"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?" + _NAME,
                          re.IGNORECASE)
_TABLE_ACTIONS = [
    (re.compile(r"\bDROP\s+COLUMN\s+(?:IF\s+EXISTS\s+)?\"?(?P<part>\w+)", re.I), "column"),
    (re.compile(r"\bDROP\s+CONSTRAINT\s+(?:IF\s+EXISTS\s+)?\"?(?P<part>\w+)", re.I),
     "constraint"),
    (re.compile(r"\bALTER\s+(?:COLUMN\s+)?\"?(?P<part>\w+)\"?\s+(?:SET\s+DATA\s+)?TYPE\b", re.I),
     "column"),
    (re.compile(r"\bALTER\s+(?:COLUMN\s+)?\"?(?P<part>\w+)\"?\s+SET\s+NOT\s+NULL\b", re.I),
     "column"),
    (re.compile(r"\bALTER\s+(?:COLUMN\s+)?\"?(?P<part>\w+)\"?\s+DROP\s+DEFAULT\b", re.I),
     "column"),
    (re.compile(r"\bRENAME\s+COLUMN\s+\"?(?P<part>\w+)", re.I), "column"),
    (re.compile(r"\bRENAME\s+CONSTRAINT\s+\"?(?P<part>\w+)", re.I), "constraint"),
]
_RENAME_TO = re.compile(
    r"^ALTER\s+(?P<kind>FUNCTION|PROCEDURE|TABLE|VIEW|MATERIALIZED\s+VIEW|TYPE|DOMAIN|INDEX|"
    r"SEQUENCE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?" + _NAME + r".*\bRENAME\s+TO\b", re.I | re.DOTALL)
_ALTER_TYPE = re.compile(r"^ALTER\s+TYPE\s+" + _NAME + r".*\b(?:RENAME\s+(?:VALUE|ATTRIBUTE)|"
                         r"DROP\s+ATTRIBUTE|ALTER\s+ATTRIBUTE)\b", re.I | re.DOTALL)
_CREATE_FUNCTION = re.compile(
    r"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+" + _NAME + r"\s*\((?P<args>[^)]*)\)",
    re.IGNORECASE)


#: First words of multi-word type names: an argument starting with one has no name.
_TYPE_STARTS = frozenset({"double", "character", "char", "varchar", "timestamp",
                          "timestamptz", "time", "bit", "interval", "national"})


@dataclasses.dataclass(frozen=True)
class Finding:
    """One destructive statement: the object it removes or changes, and what it says."""

    object: str
    statement: str


def statements(sql: str) -> Iterator[str]:
    """The statements of a migration, bodies and comments removed, whitespace collapsed."""
    text = _DOLLAR.sub("$$", sql)
    text = _BLOCK_COMMENT.sub(" ", text)
    text = _LINE_COMMENT.sub(" ", text)
    text = _QUOTED.sub("''", text)
    for part in text.split(";"):
        found = " ".join(part.split())
        if found:
            yield found


def _kind(text: str) -> str:
    word = " ".join(text.lower().split())
    return "index" if word.startswith("index") else word


def _signature(args: str) -> str:
    """An argument list without names or defaults, comparable between migrations."""
    kinds = []
    for arg in args.split(","):
        arg = re.split(r"\bDEFAULT\b|=", arg, maxsplit=1, flags=re.I)[0].strip()
        words = arg.split()
        if not words:
            continue
        if words[0].upper() in ("IN", "OUT", "INOUT", "VARIADIC"):
            words = words[1:]
        # "name type" or "type": the type is whatever follows a leading name, unless
        # the first word already starts a type ("double precision", "timestamp with ...").
        named = len(words) > 1 and words[0].lower() not in _TYPE_STARTS
        type_words = words[1:] if named else words
        kinds.append(" ".join(type_words).lower().replace("{schema}.", ""))
    return ", ".join(kinds)


def scan(migrations: Iterable[tuple[int, str]]) -> dict[int, list[Finding]]:
    """Destructive statements per migration number, for ``(number, sql)`` in order.

    Every migration is read (function signatures are remembered from all of
    them); findings are reported for every migration, and the caller decides
    which are grandfathered.
    """
    signatures: dict[str, set[str]] = {}
    found: dict[int, list[Finding]] = {}
    for number, sql in migrations:
        for statement in statements(sql):
            for finding in _findings(statement, signatures):
                found.setdefault(number, []).append(finding)
    return found


def _findings(statement: str, signatures: dict[str, set[str]]) -> Iterator[Finding]:
    short = statement[:160]
    if match := _DROP.match(statement):
        for item in _TOP_COMMA.split(match["names"]):
            if named := _LEADING_NAME.match(item.strip()):
                yield Finding(f"{_kind(match['kind'])} {named['name'].lower()}", short)
        return
    if match := _CREATE_FUNCTION.match(statement):
        name, signature = match["name"].lower(), _signature(match["args"])
        known = signatures.setdefault(name, set())
        if known and signature not in known:
            yield Finding(f"function {name}", short)
        known.add(signature)
        return
    if match := _RENAME_TO.match(statement):
        yield Finding(f"{_kind(match['kind'])} {match['name'].lower()}", short)
        return
    if match := _ALTER_TYPE.match(statement):
        yield Finding(f"type {match['name'].lower()}", short)
        return
    if match := _ALTER_TABLE.match(statement):
        table = match["name"].lower()
        for action in _TOP_COMMA.split(statement[match.end():]):
            if column := _required_new_column(action):
                yield Finding(f"column {table}.{column}", short)
                continue
            for pattern, kind in _TABLE_ACTIONS:
                if part := pattern.search(action):
                    yield Finding(f"{kind} {table}.{part['part'].lower()}", short)
                    break


def _required_new_column(action: str) -> str | None:
    """The column an ``ADD COLUMN`` action adds NOT NULL (or as a primary key) with
    nothing to fill it: the previous release's INSERTs, which leave it out, fail."""
    match = _ADD_COLUMN.match(action)
    if match is None or match["part"].lower() in _NOT_A_COLUMN:
        return None
    rest = match["rest"]
    if _REQUIRED.search(rest) and not _FILLED.search(rest):
        return match["part"].lower()
    return None
