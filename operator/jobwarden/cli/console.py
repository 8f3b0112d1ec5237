"""``jobwarden console``: serve the browser console (needs ``jobwarden[console]``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from jobwarden import errors, settings
from jobwarden.cli import EXIT_OK, arguments, common


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "console", help="serve the browser console",
        description="Serve the Jobwarden console. Off unless started; on an address other "
                    "than loopback a token is required (JOBWARDEN_CONSOLE_TOKEN or "
                    "--token-file), sent as a Bearer token or as the basic-auth password.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=arguments.int_between(1, 65535), default=None,
                        help="port (default $JOBWARDEN_HTTP_PORT, else 8787)")
    parser.add_argument("--token-file", type=Path, metavar="PATH",
                        help="file holding the access token (default "
                             "$JOBWARDEN_CONSOLE_TOKEN_FILE, else $JOBWARDEN_CONSOLE_TOKEN)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        type=_allowed_host,
                        help="also answer to this Host name (repeatable; NAME or NAME:PORT). "
                             "Without it only the bound address, localhost, 127.0.0.1 and "
                             "[::1] are served (other names: 421), unless a token is set "
                             "(default: none)")
    parser.add_argument("--read-only", action="store_true",
                        help="show everything, change nothing (every action refused)")
    parser.add_argument("--refresh", type=arguments.seconds_between(0.5, 3600), default=3.0,
                        metavar="SECONDS",
                        help="live-update interval of the pages (default 3)")
    parser.set_defaults(handler=cmd_console)


def _allowed_host(text: str) -> str:
    from jobwarden.console.settings import check_allowed_host

    try:
        return check_allowed_host(text)
    except errors.ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _token(args: argparse.Namespace) -> str | None:
    path = args.token_file
    if path is None and settings.env_text("JOBWARDEN_CONSOLE_TOKEN_FILE", ""):
        path = Path(settings.env_text("JOBWARDEN_CONSOLE_TOKEN_FILE", ""))
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise errors.ConfigurationError(
                f"cannot read the token file {str(path)!r}: {exc.strerror}") from exc
    return os.environ.get("JOBWARDEN_CONSOLE_TOKEN") or None


def cmd_console(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from jobwarden.console.app import build_app
        from jobwarden.console.settings import ConsoleSettings
    except ImportError as exc:
        raise errors.ConfigurationError(
            f"the console needs its extra: pip install 'jobwarden[console]' ({exc.name} missing)"
        ) from exc
    from jobwarden.api.client import Client
    from jobwarden.db.database import Database

    port = args.port if args.port is not None else settings.env_int("JOBWARDEN_HTTP_PORT", 8787)
    assert port is not None
    console_settings = ConsoleSettings(host=args.host, port=port, token=_token(args),
                                       read_only=args.read_only,
                                       allowed_hosts=tuple(args.allowed_host),
                                       refresh_seconds=args.refresh).check()
    # No server-side prepared statements: each search is planned for its own filter.
    database = Database(common.dsn(args), schema=common.schema(args), min_size=1, max_size=8,
                        verify=True, prepare_threshold=None, application_name="jobwarden-console")
    with Client(database=database, owns_database=True) as client:
        app = build_app(client, console_settings)
        uvicorn.run(app, host=console_settings.host, port=console_settings.port,
                    log_config=None, access_log=False, server_header=False,
                    proxy_headers=False)
    return EXIT_OK
