"""The ``jobwarden`` command line: parse, call the library, print.

Each command group lives in its own module with a ``register(subparsers)``
function; this module wires them together, maps errors to the documented exit
codes (docs/cli.md) and never prints a DSN.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from jobwarden import errors
from jobwarden.cli.arguments import UsageError
from jobwarden.observability import logfields
from jobwarden.version import VERSION

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
#: The schema no longer serves this release (docs/upgrades.md). 10-13 are run-job's.
EXIT_SCHEMA_TOO_NEW = 14
#: Ctrl-C (SIGINT): 128 + 2, as a shell reports it.
EXIT_INTERRUPTED = 130
#: stdout was closed by its reader (``| head``): 128 + SIGPIPE, as a shell reports it.
EXIT_BROKEN_PIPE = 141

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
    "jobwarden.cli.top",
    "jobwarden.cli.podruns",
]
#: Commands whose own module is all a run of them loads (the other command modules
#: import the client, the scheduler and the tick engine): a pod run's ``run-job`` is on
#: the path from a schedule's slot to the job's code (docs/benchmarks.md, "Pod per run
#: against a native CronJob"). ``--help`` before the command still lists every command.
LIGHT_COMMANDS = {"run-job": "jobwarden.cli.podruns"}

_ERROR_CODES: list[tuple[type[BaseException], int]] = [
    (errors.ConfigurationError, EXIT_CONFIG),
    (errors.DatabaseUnavailable, EXIT_DB_UNAVAILABLE),
    (errors.SchemaMissing, EXIT_SCHEMA_MISSING),
    (errors.SchemaTooNew, EXIT_SCHEMA_TOO_NEW),
    (errors.UnknownJob, EXIT_UNKNOWN_JOB),
    (errors.JobNotFound, EXIT_NOT_FOUND),
    (errors.InvalidPayload, EXIT_INVALID_INPUT),
    (UsageError, EXIT_USAGE),
    (ValueError, EXIT_INVALID_INPUT),
]

Command = Callable[[argparse.Namespace], int]


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", **JSON_FLAG)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str, sort_keys=True)
    sys.stdout.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())


#: Flags of the command as a whole, also accepted after the subcommand
#: (``jobwarden jobs list --dsn ...``): (flags, argparse options).
GLOBAL_FLAGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--dsn",), {"help": "PostgreSQL DSN (default: $JOBWARDEN_DSN or "
                          "the file named by $JOBWARDEN_DSN_FILE)"}),
    (("--schema",), {"help": "schema name (default: $JOBWARDEN_SCHEMA or jobwarden)"}),
    (("--log-level",), {"type": str.upper, "choices": ["DEBUG", "INFO", "WARNING", "ERROR"],
                        "help": "log level (default: $JOBWARDEN_LOG_LEVEL or INFO)"}),
    (("--log-format",), {"type": str.lower, "choices": ["text", "json"],
                         "help": "log line format (default: $JOBWARDEN_LOG_FORMAT or text)"}),
]
#: ``--json`` is taken before the subcommand too, by the commands that print JSON.
JSON_FLAG: dict[str, Any] = {"action": "store_true",
                             "help": "print JSON instead of a table (default: off)"}


class HelpFormatter(argparse.HelpFormatter):
    """Every flag's help shows its default: appended unless the text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or not action.option_strings or action.required \
                or action.default is argparse.SUPPRESS:
            return text
        if action.default is None or action.default == []:
            return f"{text} (default: none)"
        if isinstance(action.default, bool):
            return f"{text} (default: {'on' if action.default else 'off'})"
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """Usage errors in one line (and exit 2): the usage text is what ``--help`` is for."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser`` (subcommands and their actions)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.append(sub)
                found.extend(_subcommands(sub))
    return found


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv``: the first word that is neither a flag of the command
    as a whole nor a flag's value. None when ``-h``/``--help``/``--version`` come first."""
    takes_value = {flag for flags, _ in GLOBAL_FLAGS for flag in flags}
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
        if word in takes_value:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="jobwarden", formatter_class=HelpFormatter,
        description="Kubernetes-native background jobs on PostgreSQL.",
    )
    defaults = {"log_level": os.environ.get("JOBWARDEN_LOG_LEVEL", "INFO").upper(),
                "log_format": os.environ.get("JOBWARDEN_LOG_FORMAT", "text").lower(),
                "json": False, "dsn": None, "schema": None}
    for flags, options in GLOBAL_FLAGS:
        parser.add_argument(*flags, **options)
    parser.add_argument("--json", **JSON_FLAG)
    parser.add_argument("--version", action="version", version=f"jobwarden {VERSION}",
                        help="print the release this is and exit (docs/upgrades.md)")
    parser.set_defaults(**defaults)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in modules:
        importlib.import_module(name).register(subparsers)
    for sub in _subcommands(parser):
        sub.formatter_class = HelpFormatter
        # After the subcommand too. SUPPRESS: a flag not given there must not
        # overwrite the value given (or defaulted) before the subcommand.
        for action in sub._actions:
            if "--json" in action.option_strings:
                action.default = argparse.SUPPRESS
        have = {option for action in sub._actions for option in action.option_strings}
        for flags, options in GLOBAL_FLAGS:
            if not have.intersection(flags):
                sub.add_argument(*flags, **{**options, "default": argparse.SUPPRESS})
    return parser


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: an ISO-8601 UTC time, and the attempt's job id,
    class, attempt, queue and host as fields (observability.logfields) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        payload: dict[str, Any] = {
            "time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name,
            "message": record.getMessage(), **logfields.current()}
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


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


def _importable_current_directory() -> None:
    """Let ``--app myapp.jobs`` find ``myapp`` in the directory the command runs from.

    ``python -m`` puts it on the path; the ``jobwarden`` script does not (its own
    directory is first instead). Celery and RQ behave the same way.
    """
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def _exit_on_broken_pipe() -> int:
    """stdout's reader went away (``jobwarden jobs list | head``): stop quietly."""
    # Python flushes stdout again at exit, which would raise once more: point the
    # descriptor at /dev/null first.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    light = LIGHT_COMMANDS.get(command_of(words) or "")
    parser = build_parser([light] if light else COMMAND_MODULES)
    args = parser.parse_args(words)
    setup_logging(args.log_level, args.log_format)
    _importable_current_directory()
    handler: Command = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _exit_on_broken_pipe()
    except BaseException as exc:
        for kind, code in _ERROR_CODES:
            if isinstance(exc, kind):
                print(f"jobwarden: error: {one_line(str(exc))}", file=sys.stderr)
                return code
        raise


def one_line(text: str) -> str:
    """An error message as one line (a database error's detail lines are dropped)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def run() -> None:
    sys.exit(main())
