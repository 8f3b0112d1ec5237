"""``jobwarden migrate [--sql] [--pending]``."""

from __future__ import annotations

import argparse
from typing import Any

from jobwarden.cli import EXIT_OK, common, print_json
from jobwarden.db import migrations


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "migrate", help="create or upgrade the Jobwarden schema",
        description="Apply pending migrations. With --sql, print the SQL instead "
                    "(for DBAs who apply schema changes by hand).",
    )
    parser.add_argument("--sql", action="store_true", help="print the migration SQL, run nothing")
    parser.add_argument("--pending", action="store_true",
                        help="with --sql: only the migrations this database still needs")
    parser.add_argument("--json", action="store_true",
                        help="print applied migrations as JSON (default: off)")
    parser.set_defaults(handler=migrate)


def migrate(args: argparse.Namespace) -> int:
    if args.sql and not args.pending:
        print(migrations.script(common.schema(args)), end="")
        return EXIT_OK
    with common.database(args) as db:
        if args.sql:
            print(db.migration_script(pending_only=True), end="")
            return EXIT_OK
        applied = db.migrate()
    if args.json:
        print_json({"schema": db.schema, "applied": applied})
    elif applied:
        for name in applied:
            print(f"applied {name}")
    else:
        print(f"schema {db.schema!r} is up to date")
    return EXIT_OK
