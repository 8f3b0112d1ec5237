"""Databases the harness creates and drops, one per system plus one for the baselines.

Each system gets an empty database of its own (``<prefix><system>``) so no
schema, trigger or index of one system can slow another, while all of them
share one server, its configuration and its disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import conninfo, sql


def with_dbname(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database."""
    return conninfo.make_conninfo(dsn, dbname=dbname)


def server_facts(dsn: str) -> dict[str, str]:
    """What the numbers depend on: recorded with every result."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        facts: dict[str, str] = {}
        for setting in (
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "shared_buffers",
            "autovacuum",
        ):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
            facts[setting] = str(row[0]) if row else "?"
    return facts


def _drop(conn: psycopg.Connection[tuple[object, ...]], dbname: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


@contextlib.contextmanager
def fresh_database(dsn: str, dbname: str, *, keep: bool = False) -> Iterator[str]:
    """Create an empty database (dropping a leftover one first) and yield its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _drop(conn, dbname)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield with_dbname(dsn, dbname)
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                _drop(conn, dbname)
