"""``jobwarden top``: the live view of ``jobwarden dev``, against any database."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from jobwarden.cli import EXIT_OK, arguments, common
from jobwarden.cli.liveview import LiveView


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "top", help="live view of queues, throughput and running jobs",
        description="The live view of `jobwarden dev`, against the database of --dsn. "
                    "Cheap on big tables: no count over the whole jobs table.")
    parser.add_argument("--interval", type=arguments.seconds_between(0.2, 3600), default=2.0,
                        metavar="SECONDS",
                        help="refresh interval (default 2)")
    parser.add_argument("--iterations", type=arguments.positive_int, default=None, metavar="N",
                        help="stop after N frames (default: until Ctrl-C)")
    parser.add_argument("--no-view", action="store_true",
                        help="print one line per frame instead of redrawing the screen")
    parser.set_defaults(handler=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:
    stop = threading.Event()
    with common.client(args) as client:
        view = LiveView(client, title="jobwarden top", footer=["Ctrl-C to stop"])
        shown = 0
        try:
            while True:
                frame = view.frame()
                if args.no_view or not sys.stdout.isatty():
                    lines = frame.splitlines()
                    print(lines[0] + " | " + lines[2], flush=True)
                else:
                    print("\033[2J\033[H" + frame, flush=True)
                shown += 1
                if args.iterations is not None and shown >= args.iterations:
                    break
                stop.wait(args.interval)
        except KeyboardInterrupt:
            pass
    return EXIT_OK
