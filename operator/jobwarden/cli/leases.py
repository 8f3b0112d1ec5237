"""``jobwarden leases list`` and ``jobwarden leases clear``: see and break leases.

Clearing is for operators who know the holder is gone (a crashed host whose
lease has not lapsed yet, a stuck script). Without ``--force`` only a lapsed
lease is cleared, which is always safe; with it, a live holder loses its lease
and finds out at its next renewal or release (``lease_lost``). The row and its
fencing token stay, so the next holder's token is still larger.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jobwarden.cli import (
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    add_json,
    arguments,
    common,
    print_json,
    print_table,
)
from jobwarden.structs.leases import LeaseRecord, is_internal


def register(subparsers: Any) -> None:
    leases = subparsers.add_parser("leases", help="list and clear cluster-wide leases")
    sub = leases.add_subparsers(dest="leases_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="held leases: name, holder, token, expiry")
    listing.add_argument("--expired", action="store_true",
                         help="also show lapsed leases nobody has taken over yet")
    listing.add_argument("--prefix", help="only names starting with this, e.g. 'key:' "
                                          "(default: every name)")
    listing.add_argument("--limit", type=arguments.positive_int, default=1000,
                         help="most leases shown")
    listing.add_argument("--all", action="store_true",
                         help="also show Jobwarden's own leases (jobwarden:gauges, "
                              "operator:<loop>, maintenance:retention)")
    add_json(listing)
    listing.set_defaults(handler=cmd_list)

    clear = sub.add_parser("clear", help="force-release a lease (only a lapsed one "
                                         "unless --force)")
    clear.add_argument("name", metavar="NAME")
    clear.add_argument("--slot", type=arguments.non_negative_int,
                       help="one slot of a semaphore (default: all)")
    clear.add_argument("--force", action="store_true",
                       help="also clear a lease whose holder may still be running")
    clear.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_json(clear)
    clear.set_defaults(handler=cmd_clear)


def _expires_in(record: LeaseRecord) -> str:
    seconds = record.expires_in_seconds
    if seconds is None:
        return ""
    if seconds <= 0:
        return f"lapsed {-seconds:.1f}s ago"
    return f"{seconds:.1f}s"


def cmd_list(args: argparse.Namespace) -> int:
    with common.database(args) as db:
        found = [r for r in db.leases.list(include_expired=args.expired, prefix=args.prefix,
                                           limit=args.limit)
                 if args.all or not is_internal(r.name)]
    if args.json:
        print_json([r.as_json() for r in found])
    else:
        print_table(["NAME", "SLOT", "HOLDER", "HOST", "TOKEN", "EXPIRES IN"],
                    [[r.name, r.slot, r.owner, r.holder_host, r.token, _expires_in(r)]
                     for r in found])
    return EXIT_OK


def _confirm(prompt: str) -> bool:
    if not sys.stdin.isatty():
        print("jobwarden: refusing to clear without a terminal to confirm; pass --yes",
              file=sys.stderr)
        return False
    return input(f"{prompt} [y/N] ").strip().lower() in ("y", "yes")


def cmd_clear(args: argparse.Namespace) -> int:
    with common.database(args) as db:
        held = [r for r in db.leases.read(args.name)
                if r.owner is not None and (args.slot is None or r.slot == args.slot)]
        if not held:
            if args.json:
                print_json({"name": args.name, "cleared": []})
            else:
                print(f"lease {args.name!r} is not held", file=sys.stderr)
            return EXIT_NOT_FOUND
        live = [r for r in held if (r.expires_in_seconds or 0.0) > 0]
        if live and not args.force:
            if args.json:
                print_json({"name": args.name, "cleared": [],
                            "held": [r.as_json() for r in live]})
            for r in live:
                print(f"lease {r.name!r} slot {r.slot} is held by {r.owner} on "
                      f"{r.holder_host or '?'} for {_expires_in(r)} more; pass --force to "
                      "clear it anyway", file=sys.stderr)
            return EXIT_FAILURE
        if not args.yes:
            who = ", ".join(f"{r.owner} (slot {r.slot}, token {r.token}, "
                            f"{_expires_in(r)})" for r in held)
            if not _confirm(f"Clear lease {args.name!r} held by {who}?"):
                return EXIT_FAILURE
        cleared = db.leases.clear(args.name, force=args.force, slot=args.slot)
    if args.json:
        print_json({"name": args.name, "cleared": [r.as_json() for r in cleared]})
    else:
        for r in cleared:
            print(f"cleared lease {r.name!r} slot {r.slot} (was {r.owner}, token {r.token})")
    return EXIT_OK if cleared else EXIT_FAILURE
