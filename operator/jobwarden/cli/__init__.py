"""The ``jobwarden`` command line: parse, call the library, print.

Each command group lives in its own module with a ``register(subparsers)``
function; this module wires them together, maps errors to the documented exit
codes (docs/cli.md) and never prints a DSN.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from jobwarden import errors

#: Exit codes (documented in docs/cli.md).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DB_UNAVAILABLE = 3
EXIT_SCHEMA_MISSING = 4
EXIT_UNKNOWN_JOB = 5
EXIT_NOT_FOUND = 6
EXIT_INVALID_INPUT = 7
EXIT_TIMEOUT = 8
EXIT_CONFIG = 9

COMMAND_MODULES = [
    "jobwarden.cli.database",
    "jobwarden.cli.jobs",
    "jobwarden.cli.worker",
    "jobwarden.cli.dev",
    "jobwarden.cli.hosts",
    "jobwarden.cli.schedules",
    "jobwarden.cli.operator",
    "jobwarden.cli.leases",
    "jobwarden.cli.queues",
    "jobwarden.cli.console",
]

_ERROR_CODES: list[tuple[type[BaseException], int]] = [
    (errors.ConfigurationError, EXIT_CONFIG),
    (errors.DatabaseUnavailable, EXIT_DB_UNAVAILABLE),
    (errors.SchemaMissing, EXIT_SCHEMA_MISSING),
    (errors.UnknownJob, EXIT_UNKNOWN_JOB),
    (errors.JobNotFound, EXIT_NOT_FOUND),
    (errors.InvalidPayload, EXIT_INVALID_INPUT),
    (ValueError, EXIT_INVALID_INPUT),
]

Command = Callable[[argparse.Namespace], int]


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str, sort_keys=True)
    sys.stdout.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobwarden",
        description="Kubernetes-native background jobs on PostgreSQL.",
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: $JOBWARDEN_DSN or "
                        "the file named by $JOBWARDEN_DSN_FILE)")
    parser.add_argument("--schema", help="schema name (default: $JOBWARDEN_SCHEMA or jobwarden)")
    parser.add_argument("--log-level", type=str.upper,
                        default=os.environ.get("JOBWARDEN_LOG_LEVEL", "INFO").upper(),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="default $JOBWARDEN_LOG_LEVEL or INFO")
    parser.add_argument("--log-format", type=str.lower,
                        default=os.environ.get("JOBWARDEN_LOG_FORMAT", "text").lower(),
                        choices=["text", "json"], help="default $JOBWARDEN_LOG_FORMAT or text")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {"time": self.formatTime(record), "level": record.levelname,
                   "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted.

    A handler bound to the stream object of the moment keeps writing to it after
    it is replaced and closed (``main()`` called in-process by a test harness,
    then a background thread logging later): "Logging error ... I/O operation on
    closed file". Looking it up per record follows the replacement.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def setup_logging(level: str, fmt: str) -> None:
    handler: logging.Handler = _StderrHandler()
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The pool logs every failed reconnect attempt; the worker logs the state change once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    handler: Command = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        for kind, code in _ERROR_CODES:
            if isinstance(exc, kind):
                print(f"jobwarden: error: {exc}", file=sys.stderr)
                return code
        raise


def run() -> None:
    sys.exit(main())
