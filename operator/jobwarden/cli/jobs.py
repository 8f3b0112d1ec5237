"""``jobwarden enqueue``, ``jobwarden jobs ...`` and ``jobwarden status``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from jobwarden import errors
from jobwarden.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    add_json,
    arguments,
    common,
    filters,
    print_json,
    print_table,
)
from jobwarden.structs.states import JobStatus
from jobwarden.version import VERSION

if TYPE_CHECKING:
    from jobwarden.db.migrations import SchemaReleases
    from jobwarden.structs.hosts import ReleaseCount


def register(subparsers: Any) -> None:
    enqueue = subparsers.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("job_class", metavar="CLASS_PATH", help="e.g. myapp.jobs:SendEmail")
    enqueue.add_argument("--data", default="null", help="job data as JSON (default null)")
    enqueue.add_argument("--queue", type=arguments.name,
                         help="queue (default: the job class's, else default)")
    enqueue.add_argument("--priority", type=int,
                         help="higher runs first (default: the job class's, else 0)")
    enqueue.add_argument("--delay", type=arguments.duration, metavar="DURATION",
                         help="run no sooner than this from now, e.g. 90s, 15m, 1h "
                              "(default: now)")
    enqueue.add_argument("--unique-key",
                         help="enqueue nothing while a job with this key is unfinished "
                              "(default: none)")
    enqueue.add_argument("--app", action="append", default=[],
                         help="module(s) to import first, where the job is defined "
                              "(default: none)")
    enqueue.add_argument("--no-check", action="store_true",
                         help="enqueue even if the job class cannot be imported here")
    add_json(enqueue)
    enqueue.set_defaults(handler=cmd_enqueue)

    jobs = subparsers.add_parser("jobs", help="list, show, cancel, retry and purge jobs")
    sub = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="jobs matching a filter, newest first")
    filters.add_filter_flags(listing)
    listing.add_argument("--before", type=arguments.job_id, metavar="ID",
                         help="next page: only ids below this (the last id shown)")
    listing.add_argument("--limit", type=arguments.int_between(1, 1000), default=50,
                         help="1 to 1000 (default 50)")
    add_json(listing)
    listing.set_defaults(handler=cmd_list)
    bulk = sub.add_parser(
        "bulk", help="retry, cancel or purge every job matching a filter",
        description="Without --yes this is a dry run: it prints how many jobs would change.")
    bulk.add_argument("action", choices=["retry", "cancel", "purge"])
    filters.add_filter_flags(bulk)
    bulk.add_argument("--yes", action="store_true", help="do it (default: dry run)")
    add_json(bulk)
    bulk.set_defaults(handler=cmd_bulk)
    show = sub.add_parser("show", help="one job with its result and attempt history")
    show.add_argument("id", type=arguments.job_id)
    show.add_argument("--traceback", action="store_true",
                      help="also print the traceback of the last failed attempt")
    add_json(show)
    show.set_defaults(handler=cmd_show)
    cancel = sub.add_parser("cancel", help="cancel a pending job or ask a running one to stop")
    cancel.add_argument("id", type=arguments.job_id)
    add_json(cancel)
    cancel.set_defaults(handler=cmd_cancel)
    retry = sub.add_parser("retry", help="run a failed, interrupted or cancelled job again")
    retry.add_argument("id", type=arguments.job_id)
    add_json(retry)
    retry.set_defaults(handler=cmd_retry)
    purge = sub.add_parser("purge", help="delete finished jobs")
    purge.add_argument("--status", action="append",
                       choices=["completed", "failed", "interrupted", "cancelled"],
                       help="status to purge (repeatable; default completed)")
    purge.add_argument("--older-than", type=arguments.duration, default=None,
                       metavar="DURATION",
                       help="only jobs finished longer ago than this, e.g. 90s, 15m, 7d "
                            "(default: any age)")
    purge.add_argument("--yes", action="store_true",
                       help="purge without asking, even with no --status or --older-than")
    add_json(purge)
    purge.set_defaults(handler=cmd_purge)

    status = subparsers.add_parser("status", help="queue depth per queue and status")
    add_json(status)
    status.set_defaults(handler=cmd_status)


def _data(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise errors.InvalidPayload(f"--data is not valid JSON: {exc}") from exc


def cmd_enqueue(args: argparse.Namespace) -> int:
    data = _data(args.data)
    common.import_apps(args.app)
    with common.client(args) as client:
        result = client.enqueue(
            args.job_class, data, queue=args.queue, priority=args.priority, delay=args.delay,
            unique_key=args.unique_key, check=not args.no_check,
        )
    if args.json:
        print_json({"id": result.id, "duplicate": result.duplicate})
    else:
        print(f"{'duplicate of' if result.duplicate else 'enqueued'} job {result.id}")
    return EXIT_OK


def _first_line(text: str | None, width: int = 60) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[-1]
    return line if len(line) <= width else line[: width - 1] + "\u2026"


def cmd_list(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        where = filters.job_filter(args, now=client.db.now())
        found = client.search(where, before=args.before, limit=args.limit)
    if args.json:
        print_json([j.as_json() for j in found])
    else:
        print_table(["ID", "QUEUE", "CLASS", "STATUS", "PRI", "ATTEMPTS", "SCHEDULED FOR",
                     "HOST", "LAST ERROR"],
                    [[j.id, j.queue, j.job_class, j.status.value, j.priority,
                      f"{j.attempts}/{j.max_retries + 1}", j.run_at.isoformat(timespec="seconds"),
                      j.claimed_by, _first_line(j.last_error)] for j in found])
        if len(found) == args.limit:
            print(f"(more: --before {found[-1].id})")
    return EXIT_OK


_DONE = {"retry": "retried", "cancel": "cancelled or asked to stop", "purge": "purged"}


def cmd_bulk(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        where = filters.job_filter(args, now=client.db.now())
        result = client.bulk(args.action, where, dry_run=not args.yes)
    if args.json:
        print_json({**result.as_json(), "filter": where.as_json()})
    elif result.dry_run:
        print(f"{result.count} job(s) would be {_DONE[args.action]}; pass --yes to do it")
    else:
        print(f"{result.count} job(s) {_DONE[args.action]}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        job = client.job(args.id)
        history = client.db.jobs.attempts(args.id)
    if args.json:
        print_json({**job.as_json(), "history": [a.as_json() for a in history]})
        return EXIT_OK
    # One line per field: a multi-line last_error (usually a traceback) is shown by
    # its last line here, and whole only with --traceback, as the last thing printed.
    multiline = bool(job.last_error and "\n" in job.last_error.strip())
    for key, value in job.as_json().items():
        if key in ("data", "result") and value is not None:
            value = json.dumps(value)
        if key == "last_error" and multiline:
            value = _first_line(value, width=100) + "  (whole text: --traceback)"
        print(f"{key:>17}: {'' if value is None else value}")
    if history:
        print("\nattempts (oldest first):")
        print_table(["#", "STARTED", "SECONDS", "HOST", "OUTCOME", "THEN", "ERROR"],
                    [[a.attempt,
                      a.started_at.isoformat(timespec="seconds") if a.started_at else "",
                      "" if a.duration_seconds is None else f"{a.duration_seconds:.3f}",
                      a.host, a.outcome, a.status_after, _first_line(a.error, width=80)]
                     for a in history])
    if args.traceback:
        last = next((a for a in reversed(history) if a.traceback), None)
        if last is not None and last.traceback:
            print(f"\ntraceback of attempt {last.attempt}:\n{last.traceback.rstrip()}")
        elif job.last_error:
            print(f"\nlast error:\n{job.last_error.rstrip()}")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        status = client.cancel(args.id)
        asked = status is JobStatus.PROCESSING
    if args.json:
        print_json({"id": args.id, "status": status.value, "cancel_requested": asked})
    elif asked:
        print(f"job {args.id} is running: asked it to stop")
    else:
        print(f"job {args.id} is {status.value}")
    return EXIT_OK if status in (JobStatus.CANCELLED, JobStatus.PROCESSING) else EXIT_FAILURE


def cmd_retry(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        ok = client.retry(args.id)
        status = client.job(args.id).status
    if args.json:
        print_json({"id": args.id, "retried": ok, "status": status.value})
    else:
        print(f"job {args.id} {'will run again' if ok else 'was not retried'} ({status.value})")
    return EXIT_OK if ok else EXIT_FAILURE


def _confirmed(question: str) -> bool:
    """Ask on a terminal; anywhere else (a script, CI) the answer is no."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def cmd_purge(args: argparse.Namespace) -> int:
    # No filter at all deletes every completed job of every age: ask first.
    if args.status is None and args.older_than is None and not args.yes \
            and not _confirmed("delete every completed job, of any age?"):
        print("jobwarden: error: purge without --status or --older-than deletes every "
              "completed job: confirm on a terminal or pass --yes", file=sys.stderr)
        return EXIT_USAGE
    with common.client(args) as client:
        deleted = client.purge(status=args.status or ["completed"],
                               older_than=args.older_than or 0.0)
    if args.json:
        print_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} job(s)")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from jobwarden.cli import hosts as hosts_cli
    from jobwarden.db import jobs as jobs_db
    from jobwarden.db import plans

    with common.client(args) as client:
        stats = client.stats()
        # "pending" is what is due now; "scheduled" is pending but not yet due
        # (delayed, backing off before a retry, or a future run_at).
        scheduled = plans.run(client.db, jobs_db.scheduled_counts_plan())
        for queue, counts in stats.items():
            counts["scheduled"] = scheduled.get(queue, 0)
            counts["pending"] -= counts["scheduled"]
        # Autovacuum off, or dead tuples piling up in the hot tables (issue 16):
        # warnings, not failures -- the queues still work, only slower.
        health = client.db.maintenance.health()
        # The releases running (docs/upgrades.md): during a rolling upgrade, two.
        releases = client.db.hosts.releases()
        schema = client.db.schema_releases()
        if args.json:
            print_json({"queues": stats, "hosts": hosts_cli.hosts_json(client),
                        "database": health.as_json(),
                        "versions": [r.as_json() for r in releases],
                        "schema": {"newest_migration": schema.newest_migration,
                                   "serves_from": schema.serves_from}})
            return EXIT_OK
        statuses = ["pending", "scheduled", *[s.value for s in JobStatus
                                              if s is not JobStatus.PENDING]]
        rows = [[queue, *[counts[s] for s in statuses]]
                for queue, counts in sorted(stats.items())]
        print_table(["QUEUE", *[s.upper() for s in statuses]], rows)
        hosts_cli.print_hosts(client)
        _print_releases(releases, schema)
        for warning in health.warnings():
            print(f"warning: {warning}")
    return EXIT_OK


def _print_releases(releases: list[ReleaseCount], schema: SchemaReleases) -> None:
    """The RELEASE table of ``jobwarden status``: worker processes per Jobwarden release."""
    print()
    serves = f"release {schema.serves_from} and later" if schema.serves_from \
        else "every release since 0.1.0"
    print(f"schema: migration {schema.newest_migration:04d}, serves {serves}; "
          f"this client is {VERSION}")
    if releases:
        print_table(["RELEASE", "NEEDS MIGRATION", "WORKERS"],
                    [[r.release or "0.1.0 or older", _migration(r.schema_needs), r.workers]
                     for r in releases])


def _migration(number: int | None) -> str:
    return "-" if number is None else f"{number:04d}"
