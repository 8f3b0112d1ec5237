"""``jobwarden queues list|pause|resume``."""

from __future__ import annotations

import argparse
import getpass
import socket
from typing import Any

from jobwarden.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    add_json,
    arguments,
    common,
    print_json,
    print_table,
)


def register(subparsers: Any) -> None:
    queues = subparsers.add_parser("queues", help="list, pause and resume queues")
    sub = queues.add_subparsers(dest="queues_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="depth, oldest due age, running and throughput")
    listing.add_argument("--window", type=arguments.positive_duration, default=300.0,
                         metavar="SECONDS",
                         help="throughput window (default 300)")
    add_json(listing)
    listing.set_defaults(handler=cmd_list)
    pause = sub.add_parser("pause", help="stop claims from a queue (running jobs finish)")
    pause.add_argument("queue", type=arguments.name, help="the queue (not blank, as enqueue's)")
    add_json(pause)
    pause.set_defaults(handler=cmd_pause)
    resume = sub.add_parser("resume", help="let workers claim from a paused queue again")
    resume.add_argument("queue", type=arguments.non_empty)
    add_json(resume)
    resume.set_defaults(handler=cmd_resume)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def cmd_list(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        found = client.queues(window_seconds=args.window)
    if args.json:
        print_json([q.as_json() for q in found])
        return EXIT_OK
    print_table(["QUEUE", "STATE", "PENDING", "DUE", "OLDEST DUE", "RUNNING",
                 f"DONE/{args.window:g}s", "FAILED", "PER MIN"],
                [[q.queue, "paused" if q.paused else "active", q.pending, q.due,
                  _age(q.oldest_due_seconds) if q.due else "-", q.running, q.completed,
                  q.failed, f"{q.completed_per_minute:.1f}"] for q in found])
    return EXIT_OK


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no user name in a bare container: the host still says where
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def cmd_pause(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        client.pause_queue(args.queue, by=_who())
    if args.json:
        print_json({"queue": args.queue, "paused": True})
    else:
        print(f"queue {args.queue!r} paused: workers claim nothing from it until resumed")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        resumed = client.resume_queue(args.queue)
    if args.json:
        print_json({"queue": args.queue, "resumed": resumed})
    else:
        print(f"queue {args.queue!r} {'resumed' if resumed else 'was not paused'}")
    return EXIT_OK if resumed else EXIT_FAILURE
