"""Helpers shared by the command modules: building a Database or Client from flags."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from jobwarden import errors, settings, version
from jobwarden.db.database import Database

if TYPE_CHECKING:  # imported by client(): `run-job` starts without the client's modules
    from jobwarden.api.client import Client


def dsn(args: argparse.Namespace) -> str:
    found = args.dsn or settings.env_dsn()
    if not found:
        raise errors.ConfigurationError("no database DSN: pass --dsn or set JOBWARDEN_DSN")
    return str(found)


def schema(args: argparse.Namespace) -> str:
    return str(args.schema or settings.env_schema())


def import_apps(modules: Iterable[str]) -> None:
    """Import the ``--app`` modules; one that does not import is an UnknownJob (exit 5).

    Whatever the module raises (a missing dependency, a typo, an error in its
    top level) is the user's code failing to load, reported in one line.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            found = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise errors.UnknownJob(f"cannot import app module {module!r} ({found})") from exc


def database(args: argparse.Namespace, *, max_size: int = 2) -> Database:
    """A checked Database: a bad DSN or a down server fails fast with a clear message."""
    return Database(dsn(args), schema=schema(args), min_size=1, max_size=max_size, verify=True)


def client(args: argparse.Namespace) -> Client:
    from jobwarden.api.client import Client

    return Client(database=database(args), owns_database=True)


def check_schema_current(db: Database) -> None:
    """Refuse to run on a schema that is missing or behind (exit 4), or that no longer
    serves this release (exit 14): a long-running process must not start claiming
    with statements the schema cannot answer (docs/upgrades.md).

    A schema ahead of this code (migrations it does not know) is fine as long as
    each of them still serves this release: that is the previous release running
    during a rolling upgrade or after a ``helm rollback``.
    """
    db.check()
    pending = db.pending_migrations()
    if pending:
        raise errors.SchemaMissing(
            f"the Jobwarden schema {db.schema!r} is missing or behind ({len(pending)} "
            "migration(s) pending): run `jobwarden migrate`")
    found = db.schema_releases()
    if found.serves_from is not None and \
            version.parse(found.serves_from) > version.parse(version.VERSION):
        raise errors.SchemaTooNew(
            f"the Jobwarden schema {db.schema!r} (migration {found.newest_migration:04d}) "
            f"serves release {found.serves_from} or later, and this is {version.VERSION}: "
            f"run jobwarden {found.serves_from} or later")
