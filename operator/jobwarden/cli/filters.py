"""The job filter flags shared by ``jobs list`` and ``jobs bulk``, parsed into a JobFilter."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable

from jobwarden.cli import arguments
from jobwarden.structs.search import JobFilter, parse_time
from jobwarden.structs.states import JobStatus


def add_filter_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", action="append", choices=[s.value for s in JobStatus],
                        help="status (repeatable)")
    parser.add_argument("--queue", help="queue name")
    parser.add_argument("--class", dest="job_class", help="exact class path")
    parser.add_argument("--class-prefix", help="class path starts with this")
    parser.add_argument("--since", metavar="TIME", type=_time("--since"),
                        help="created at or after TIME: ISO 8601, or an age like 90s, 15m, 2h, 3d")
    parser.add_argument("--until", metavar="TIME", type=_time("--until"),
                        help="created before TIME (same forms)")
    parser.add_argument("--text", help="case-insensitive text in the data or the last error")
    parser.add_argument("--error", help="case-insensitive text in the last error")


def _time(flag: str) -> Callable[[str], str]:
    """A TIME flag's syntax, checked while parsing (exit 2); the database's clock
    places an age later, in :func:`job_filter`."""
    def check(text: str) -> str:
        try:
            parse_time(text, flag=flag, now=datetime.datetime.now(datetime.UTC))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return check


def job_filter(args: argparse.Namespace, *, now: datetime.datetime) -> JobFilter:
    since = parse_time(args.since, flag="--since", now=now) if args.since else None
    until = parse_time(args.until, flag="--until", now=now) if args.until else None
    if since and until and since >= until:
        raise arguments.UsageError("--since must be before --until")
    return JobFilter(
        statuses=tuple(JobStatus(s) for s in dict.fromkeys(args.status or [])),
        queue=args.queue, job_class=args.job_class, class_prefix=args.class_prefix,
        created_from=since, created_to=until, text=args.text, error=args.error,
    )
