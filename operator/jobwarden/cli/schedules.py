"""``jobwarden schedules ...``: list, show, next, enqueue-due, backfill, run-now, suspend,
resume, set.

Exit codes (docs/cli.md): a schedule name that does not exist exits
EXIT_NOT_FOUND (6); an invalid definition or range exits EXIT_INVALID_INPUT (7)
with the reason; ``enqueue-due`` exits EXIT_FAILURE (1) when the pass counted
errors (they are in the log).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import json
import sys
from typing import Any
from zoneinfo import ZoneInfo

from jobwarden import errors
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
from jobwarden.schedules import store
from jobwarden.structs import policies
from jobwarden.structs.schedules import ScheduleRecord


def _instant(text: str) -> dt.datetime:
    """ISO 8601 with an offset or Z; a bare date or naive time is refused (which zone?)."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset; add one, e.g. {text}Z or {text}+02:00")
    return value


def _whole_seconds(text: str) -> int:
    """A duration (90s, 15m, 1h) stored as whole seconds."""
    return round(arguments.duration(text))


_positive = arguments.positive_int
#: ``schedules next -n``: each slot is computed in turn (a huge count never ended).
MAX_NEXT = 1000


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("schedules", help="recurring schedules")
    sub = parser.add_subparsers(dest="schedules_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="every schedule with its next run and counts")
    add_json(listing)
    listing.set_defaults(handler=cmd_list)

    show = sub.add_parser("show", help="one schedule in full")
    show.add_argument("name")
    add_json(show)
    show.set_defaults(handler=cmd_show)

    slots = sub.add_parser("slots", help="the last slots with their fate (enqueued, skipped, "
                                         "missed, replaced, dropped, deferred), newest first")
    slots.add_argument("name")
    slots.add_argument("-n", "--count", type=_positive, default=20,
                       help="how many (default 20; at most 50 are kept)")
    add_json(slots)
    slots.set_defaults(handler=cmd_slots)

    upcoming = sub.add_parser("next", help="the next run times, in the schedule's zone and UTC")
    upcoming.add_argument("name")
    upcoming.add_argument("-n", "--count", type=arguments.int_between(1, MAX_NEXT), default=5,
                          help=f"how many (at most {MAX_NEXT})")
    add_json(upcoming)
    upcoming.set_defaults(handler=cmd_next)

    due = sub.add_parser("enqueue-due", help="run one schedule-runner pass now")
    due.add_argument("--limit", type=_positive, default=10_000,
                     help="schedules to plan at most (default 10000)")
    add_json(due)
    due.set_defaults(handler=cmd_enqueue_due)

    backfill = sub.add_parser(
        "backfill", help="enqueue the slots of a past range (slots with a job are skipped)")
    backfill.add_argument("name")
    backfill.add_argument("--from", dest="start", type=_instant, required=True,
                          metavar="ISO",
                          help="first instant, e.g. 2024-05-01T00:00:00Z (required)")
    backfill.add_argument("--to", dest="end", type=_instant, required=True, metavar="ISO",
                          help="last instant (inclusive, not in the future; required)")
    backfill.add_argument("--max-slots", type=_positive, default=store.DEFAULT_BACKFILL_MAX,
                          help=f"refuse a range with more slots (default "
                               f"{store.DEFAULT_BACKFILL_MAX})")
    add_json(backfill)
    backfill.set_defaults(handler=cmd_backfill)

    run_now = sub.add_parser(
        "run-now", help="enqueue one run of the schedule's job now, outside its slots "
                        "(like kubectl create job --from=cronjob/x)")
    run_now.add_argument("name")
    run_now.add_argument("--request", default=None, metavar="ID",
                         help="idempotency id: the same id enqueues at most one job "
                              "(default: none, every call enqueues one)")
    add_json(run_now)
    run_now.set_defaults(handler=cmd_run_now)

    for action, helptext in (("suspend", "stop enqueuing (until resume)"),
                             ("resume", "lift a suspension (slots passed meanwhile are skipped)")):
        cmd = sub.add_parser(action, help=helptext)
        cmd.add_argument("name")
        add_json(cmd)
        cmd.set_defaults(handler=cmd_suspend if action == "suspend" else cmd_resume)

    setter = sub.add_parser("set", help="create or change a schedule (source=cli)")
    setter.add_argument("name")
    kind = setter.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", help="5-field cron expression or @daily-style macro "
                                     "(one of --cron and --interval, no default)")
    kind.add_argument("--interval", help="fixed interval aligned to the epoch: 30s, 5m, 2h "
                                         "(one of --cron and --interval, no default)")
    setter.add_argument("--timezone", default="UTC", help="IANA zone for cron (default UTC)")
    setter.add_argument("--job", dest="job_class", required=True, metavar="CLASS_PATH",
                        help="e.g. myapp.jobs:Report (required, no default)")
    setter.add_argument("--data", default="null", help="job data as JSON (default null)")
    setter.add_argument("--queue", type=arguments.name, default=None,
                        help="queue of its jobs (default: the job class's, else default)")
    setter.add_argument("--priority", type=int, default=None,
                        help="priority of its jobs (default: the job class's, else 0)")
    setter.add_argument("--timeout", type=arguments.positive_duration, default=None,
                        metavar="DURATION",
                        help="per-attempt time limit, e.g. 90s, 15m, 1h "
                             "(default: the job class's)")
    setter.add_argument("--max-retries", type=arguments.non_negative_int, default=None,
                        help="retries of its jobs (default: the job class's)")
    setter.add_argument("--catch-up", default="latest", choices=["latest", "none", "all"],
                        help="slots missed while nothing ran")
    setter.add_argument("--catch-up-window", type=_whole_seconds, default=3600,
                        metavar="DURATION", help="how far back missed slots count")
    setter.add_argument("--catch-up-max", type=arguments.non_negative_int, default=10,
                        help="most missed slots enqueued at once")
    setter.add_argument("--overlap", default="Allow", choices=list(policies.OVERLAPS),
                        help="when a run is still going at the next slot")
    setter.add_argument("--suspended", action="store_true", help="create it suspended")
    setter.add_argument("--app", action="append", default=[],
                        help="module(s) to import first, so the job class's own defaults "
                             "(queue, timeout, retries) are used (default: none)")
    setter.add_argument("--no-check", action="store_true",
                        help="store the job path even if its module imports here and has "
                             "no such class")
    add_json(setter)
    setter.set_defaults(handler=cmd_set)

    delete = sub.add_parser("delete", help="remove a schedule (its jobs stay)")
    delete.add_argument("name")
    add_json(delete)
    delete.set_defaults(handler=cmd_delete)


def _when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z") \
        if value else "-"


def _expression(record: ScheduleRecord) -> str:
    if record.interval:
        return f"every {record.interval}"
    return f"{record.cron} ({record.timezone})"


def _state(record: ScheduleRecord) -> str:
    return f"suspended ({record.suspended_by})" if record.suspended else "active"


def _not_found(name: str) -> int:
    print(f"jobwarden: error: no schedule named {name!r}", file=sys.stderr)
    return EXIT_NOT_FOUND


def cmd_list(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        found = client.schedules.list()
    if args.json:
        print_json([r.as_json() for r in found])
        return EXIT_OK
    print_table(
        ["NAME", "SCHEDULE", "JOB", "STATE", "NEXT", "LAST SLOT", "LAST JOB", "ENQUEUED",
         "SKIPPED", "MISSED", "REPLACED", "DROPPED", "DEFERRED", "SOURCE"],
        [[r.name, _expression(r), r.job_class, _state(r), _when(r.next_slot),
          _when(r.last_slot), r.last_job_status or "-", r.enqueued_count, r.skipped_count,
          r.missed_count, r.replaced_count, r.dropped_count, r.deferred_count, r.source]
         for r in found])
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        record = client.schedules.get(args.name)
    if record is None:
        return _not_found(args.name)
    if args.json:
        print_json(record.as_json())
    else:
        for key, value in record.as_json().items():
            if key == "data" and value is not None:
                value = json.dumps(value)
            print(f"{key:>24}: {'' if value is None else value}")
    return EXIT_OK


def cmd_slots(args: argparse.Namespace) -> int:
    """The schedule's slot history: each slot's fate, its job and the job's status now."""
    with common.client(args) as client:
        record = client.schedules.get(args.name)
        if record is None:
            return _not_found(args.name)
        history = client.db.schedules.slots(args.name, limit=args.count)
    if args.json:
        print_json({"name": record.name, "counts": record.fate_counts(),
                    "slots": [s.as_json() for s in history]})
        return EXIT_OK
    print("fates: " + ", ".join(f"{fate} {count}"
                                for fate, count in record.fate_counts().items()))
    print_table(["SLOT (UTC)", "FATE", "JOB", "JOB STATUS"],
                [[_when(s.slot), s.fate, s.job_id or "-", s.job_status or "-"]
                 for s in history])
    return EXIT_OK


def cmd_next(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        record = client.schedules.get(args.name)
        if record is None:
            return _not_found(args.name)
        slots = client.schedules.next_slots(args.name, count=args.count)
    zone = ZoneInfo(record.timezone)
    rows = [(s.astimezone(zone), s.astimezone(dt.UTC)) for s in slots]
    if args.json:
        print_json({"name": record.name, "timezone": record.timezone,
                    "suspended": record.suspended,
                    "next": [{"local": local.isoformat(), "utc": _when(utc)}
                             for local, utc in rows]})
        return EXIT_OK
    if record.suspended:
        print(f"schedule {record.name} is suspended ({record.suspended_by}); "
              "these are the times it would run:")
    print_table([f"LOCAL ({record.timezone})", "UTC"],
                [[local.isoformat(timespec="seconds"), _when(utc)] for local, utc in rows])
    return EXIT_OK


def cmd_enqueue_due(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        report = client.schedules.enqueue_due(limit=args.limit)
    if args.json:
        print_json(report.as_json())
    else:
        print(f"checked {report.checked}, enqueued {report.enqueued}, duplicates "
              f"{report.duplicates}, skipped {report.skipped}, missed {report.missed}, "
              f"errors {report.errors}" + (" (more due: run again)" if report.more else ""))
    return EXIT_FAILURE if report.errors else EXIT_OK


def cmd_backfill(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        if client.schedules.get(args.name) is None:
            return _not_found(args.name)
        done = client.schedules.backfill(args.name, start=args.start, end=args.end,
                                         max_slots=args.max_slots)
    if args.json:
        print_json(done.as_json())
    else:
        print(f"{len(done.slots)} slot(s) in range: enqueued {done.enqueued}, "
              f"already had a job {done.duplicates}")
    return EXIT_OK


def cmd_run_now(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        if client.schedules.get(args.name) is None:
            return _not_found(args.name)
        done = client.schedules.run_now(args.name, request=args.request)
    if args.json:
        print_json(done.as_json())
    elif done.duplicate:
        print(f"run-now {args.request!r} was already enqueued as job {done.job_id}")
    else:
        print(f"enqueued job {done.job_id}")
    return EXIT_OK


def _suspension(args: argparse.Namespace, *, suspend: bool) -> int:
    with common.client(args) as client:
        api = client.schedules
        record = api.suspend(args.name) if suspend else api.resume(args.name)
    if record is None:
        return _not_found(args.name)
    if args.json:
        print_json(record.as_json())
    elif record.suspended and not suspend:
        print(f"schedule {record.name} stays suspended: its definition says so "
              f"(suspended_by={record.suspended_by}); change the definition to resume it")
        return EXIT_FAILURE
    else:
        print(f"schedule {record.name} is {_state(record)}"
              + (f", next run {_when(record.next_slot)}" if not record.suspended else ""))
    return EXIT_OK


def cmd_suspend(args: argparse.Namespace) -> int:
    return _suspension(args, suspend=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _suspension(args, suspend=False)


def _importable(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        return False


def cmd_set(args: argparse.Namespace) -> int:
    try:
        data = json.loads(args.data)
    except json.JSONDecodeError as exc:
        raise errors.InvalidPayload(f"--data is not valid JSON: {exc}") from exc
    job: Any = args.job_class
    common.import_apps(args.app)
    from jobwarden.jobs import definitions
    module_name, _ = definitions.resolve_path_syntax(args.job_class)
    if not args.no_check and (args.app or _importable(module_name)):
        # The job's module is here: check the class exists, as enqueue does (a typo
        # would otherwise be stored and fail at every slot). A module that is not
        # importable here (the code lives only in the workers) is not checked.
        job = definitions.resolve(args.job_class)
    spec = store.validate(
        args.name, cron=args.cron, interval=args.interval, timezone=args.timezone,
        job_class=job, data=data, queue=args.queue, priority=args.priority,
        timeout_seconds=args.timeout, max_retries=args.max_retries, catch_up=args.catch_up,
        catch_up_window_seconds=args.catch_up_window, catch_up_max=args.catch_up_max,
        overlap=args.overlap, suspended=args.suspended, source="cli",
    )
    with common.client(args) as client:
        record = client.schedules.apply(spec)
    if args.json:
        print_json(record.as_json())
    else:
        print(f"schedule {record.name}: {_expression(record)} -> {record.job_class}, "
              f"{_state(record)}" + (f", next run {_when(record.next_slot)}"
                                     if record.next_slot else ""))
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    with common.client(args) as client:
        deleted = client.schedules.delete(args.name)
    if args.json:
        print_json({"name": args.name, "deleted": deleted})
    elif deleted:
        print(f"deleted schedule {args.name}")
    if not deleted:
        return _not_found(args.name)
    return EXIT_OK
