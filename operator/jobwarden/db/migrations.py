"""Versioned schema migrations (``jobwarden migrate``).

Migrations are numbered ``.sql`` files applied in order, each in its own
transaction together with its ``schema_migrations`` row, so a crash leaves
either all of a migration or none of it. A transaction-scoped advisory lock
serialises concurrent migrators (two operator replicas starting at once)
without any session state, so it also works behind a transaction-mode pooler.
Runtime code never runs DDL: only this module does, and only when asked.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import re
import tomllib

import psycopg
from psycopg import sql

from jobwarden import version
from jobwarden.db import queries

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@functools.cache
def newest_known() -> int:
    """The newest migration this code ships: the newest it knows, and (since its
    statements may use anything up to it) the newest it needs."""
    return max((m.version for m in available()), default=0)


def available() -> list[Migration]:
    folder = importlib.resources.files("jobwarden.db") / "migrations"
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(
                    version=int(match.group("version")),
                    name=match.group("name"),
                    sql=entry.read_text(encoding="utf-8"),
                )
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


@dataclasses.dataclass(frozen=True)
class Contraction:
    """A migration's statement that removes or changes an object an earlier release
    used, and the first release that stopped using it (docs/upgrades.md)."""

    migration: int
    object: str
    stopped_using: str
    why: str


def contractions() -> list[Contraction]:
    """The entries of ``migrations/contractions.toml``, in file order."""
    resource = importlib.resources.files("jobwarden.db") / "migrations" / "contractions.toml"
    data = tomllib.loads(resource.read_text(encoding="utf-8"))
    return [Contraction(migration=int(entry["migration"]), object=str(entry["object"]),
                        stopped_using=str(entry["stopped_using"]), why=str(entry.get("why", "")))
            for entry in data.get("contraction", [])]


def serves_from(migration: int) -> str | None:
    """The oldest release the schema serves once ``migration`` is applied, as far as
    that migration is concerned: the newest release that stopped using an object it
    removes, or None for a migration that only adds (it serves every release)."""
    releases = [c.stopped_using for c in contractions() if c.migration == migration]
    return max(releases, key=version.parse) if releases else None


def _bootstrap(schema: str) -> str:
    return queries.render(
        "CREATE SCHEMA IF NOT EXISTS {schema};\n"
        "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (\n"
        "    version integer PRIMARY KEY,\n"
        "    name text NOT NULL,\n"
        "    applied_at timestamptz NOT NULL DEFAULT now()\n"
        ");",
        schema,
    )


#: The table (migration 0020) where each migration's release record goes.
_RELEASES_TABLE = "CREATE TABLE {schema}.migration_releases"


def _release_record(schema: str, migration: Migration) -> str:
    """The statement that records which release applied ``migration`` and the oldest
    release the schema serves after it (docs/upgrades.md)."""
    serves = serves_from(migration.version)
    for number in (version.VERSION, serves or "0.0.0"):
        version.parse(number)  # MAJOR.MINOR.PATCH (digits and dots): safe to quote as is
    quoted = "NULL" if serves is None else f"'{serves}'"
    return queries.render(
        "INSERT INTO {schema}.migration_releases (version, applied_by, serves_from) "  # noqa: S608
        f"VALUES ({migration.version:d}, '{version.VERSION}', {quoted}) "
        "ON CONFLICT (version) DO NOTHING;",
        schema,
    )


def script(schema: str, *, pending_only: list[int] | None = None) -> str:
    """The SQL a DBA would run by hand: bootstrap plus each (pending) migration."""
    parts = [f"-- Jobwarden schema {schema!r}", "BEGIN;", _bootstrap(schema)]
    recorded = False
    for migration in available():
        recorded = recorded or _RELEASES_TABLE in migration.sql
        if pending_only is not None and migration.version not in pending_only:
            continue
        parts.append(f"\n-- {migration.version:04d}_{migration.name}")
        parts.append(queries.render(migration.sql, schema).strip())
        parts.append(
            queries.render(
                "INSERT INTO {schema}.schema_migrations (version, name) "  # noqa: S608
                f"VALUES ({migration.version:d}, '{migration.name}');",  # names match [a-z0-9_]
                schema,
            )
        )
        if recorded:
            parts.append(_release_record(schema, migration))
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def _lock_key(schema: str) -> int:
    # Stable 63-bit key per schema: the same on every host and Python version.
    import hashlib

    digest = hashlib.sha256(f"jobwarden-migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def applied(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[int]:
    table = f"{sql.Identifier(schema).as_string(None)}.schema_migrations"
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if not exists or not exists[0]:
        return []
    rows = conn.execute(
        sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY version").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    return [int(str(r[0])) for r in rows]


def pending(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[Migration]:
    done = set(applied(conn, schema))
    return [m for m in available() if m.version not in done]


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[Migration]:
    """Apply every pending migration; return the ones applied by this call."""
    ran: list[Migration] = []
    recorded = False
    for migration in available():
        recorded = recorded or _RELEASES_TABLE in migration.sql
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
            conn.execute(_bootstrap(schema))
            already = conn.execute(
                sql.SQL("SELECT 1 FROM {}.schema_migrations WHERE version = %s").format(
                    sql.Identifier(schema)
                ),
                (migration.version,),
            ).fetchone()
            if already:
                continue
            conn.execute(queries.render(migration.sql, schema))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(
                    sql.Identifier(schema)
                ),
                (migration.version, migration.name),
            )
            if recorded:
                conn.execute(_release_record(schema, migration))
            ran.append(migration)
    return ran


@dataclasses.dataclass(frozen=True)
class SchemaReleases:
    """What the schema says about releases: the newest migration applied, and the
    oldest release it serves (None: every release; docs/upgrades.md)."""

    newest_migration: int
    serves_from: str | None


def schema_releases(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> SchemaReleases:
    done = applied(conn, schema)
    table = f"{sql.Identifier(schema).as_string(None)}.migration_releases"
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    floors: list[str] = []
    if exists and exists[0]:
        rows = conn.execute(
            sql.SQL("SELECT serves_from FROM {}.migration_releases "
                    "WHERE serves_from IS NOT NULL").format(sql.Identifier(schema))).fetchall()
        floors = [str(r[0]) for r in rows]
    return SchemaReleases(newest_migration=max(done, default=0),
                          serves_from=max(floors, key=version.parse) if floors else None)
