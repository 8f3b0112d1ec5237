"""``jobwarden drain``, ``jobwarden resume``, ``jobwarden tick`` and the hosts part of ``status``.

Exit codes (docs/hosts.md, docs/cli.md): ``drain --wait`` exits 0 once the
drained hosts run nothing, EXIT_TIMEOUT (8) when its wait ends first, and
EXIT_NOT_FOUND (6) when ``--host`` names no registered host. ``tick`` exits 0
when the tick ran (or was skipped as overlapping), EXIT_FAILURE (1) when it failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from jobwarden import errors, settings
from jobwarden import tick as ticks
from jobwarden.api.client import Client
from jobwarden.cli import (
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    add_json,
    arguments,
    common,
    print_json,
    print_table,
)
from jobwarden.coordination.hosts import DEFAULT_DRAIN_EXPIRES
from jobwarden.structs.hosts import HostStatus

#: ``--wait`` without a value waits this long.
DEFAULT_WAIT = 600.0


_seconds = arguments.duration


def _tick_max_jobs(text: str) -> int:
    try:
        value = ticks.check_max_jobs(arguments.whole_number(text), "--max-jobs")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value > arguments.MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {arguments.MAX_COUNT}, "
                                         f"not {arguments.echo(text)}")
    return value


def _tick_timeout(text: str) -> float:
    try:
        return ticks.check_timeout(arguments.parse_duration(text), "--timeout")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--host", type=arguments.name,
                        help="host name (default: this machine's host name: "
                             "$JOBWARDEN_HOST, $POD_NAME or the hostname)")
    target.add_argument("--pool", type=arguments.name,
                        help="every host of this worker pool (default: --host's default)")


def register(subparsers: Any) -> None:
    drain = subparsers.add_parser(
        "drain", help="stop a host or pool from claiming jobs (running jobs finish)",
        description="Mark hosts draining: they claim nothing new and finish what they run. "
                    "With --wait, show progress until they are idle (exit 0) or the wait "
                    f"ends (exit {EXIT_TIMEOUT}).")
    _target(drain)
    drain.add_argument("--wait", nargs="?", type=_seconds, const=DEFAULT_WAIT, default=None,
                       metavar="SECONDS",
                       help=f"wait until idle (default: no wait; bare --wait: "
                            f"{DEFAULT_WAIT:g}s)")
    drain.add_argument("--expires", type=_seconds, default=DEFAULT_DRAIN_EXPIRES,
                       metavar="SECONDS",
                       help=f"lift the drain by itself after this long "
                            f"(default {DEFAULT_DRAIN_EXPIRES:g}; 0 = until resumed)")
    drain.add_argument("--reason", default="drain", help="shown in status (default: drain)")
    drain.add_argument("--interval", type=_seconds, default=1.0, help=argparse.SUPPRESS)
    add_json(drain)
    drain.set_defaults(handler=cmd_drain)

    resume = subparsers.add_parser("resume", help="lift a drain")
    _target(resume)
    add_json(resume)
    resume.set_defaults(handler=cmd_resume)

    tick = subparsers.add_parser(
        "tick", help="run one tick here: refresh the host, reap, due schedules, some jobs",
        description="Run one tick in this process (no token needed): the same work the "
                    "worker's /tick route does.")
    tick.add_argument("--app", action="append", default=[],
                      help="module(s) defining jobs, comma-separated (repeatable; "
                           "default $JOBWARDEN_APPS)")
    tick.add_argument("--host", type=arguments.name,
                      help="host name (default: $JOBWARDEN_HOST, $POD_NAME, hostname)")
    tick.add_argument("--pool", type=arguments.name, default=None,
                      help="pool (default: $JOBWARDEN_POOL or default)")
    tick.add_argument("--queues", default=None, help="queues, comma-separated (default: all)")
    tick.add_argument("--max-jobs", type=_tick_max_jobs, default=None,
                      help="run at most this many jobs (default $JOBWARDEN_TICK_MAX_JOBS or 10)")
    tick.add_argument("--timeout", type=_tick_timeout, default=None,
                      help="per-job time limit in seconds (default $JOBWARDEN_TICK_TIMEOUT "
                           "or 300)")
    add_json(tick)
    tick.set_defaults(handler=cmd_tick)


def _resolve_target(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.pool:
        return None, args.pool
    return args.host or settings.default_host_name(), None


def _progress_line(running: dict[str, int], elapsed: float) -> str:
    total = sum(running.values())
    busy = ", ".join(f"{host}: {n}" for host, n in sorted(running.items()) if n)
    return f"[{elapsed:5.1f}s] {total} job(s) running" + (f" ({busy})" if busy else "")


def cmd_drain(args: argparse.Namespace) -> int:
    host, pool = _resolve_target(args)
    with common.client(args) as client:
        drained = client.hosts.drain(host=host, pool=pool, expires_in=args.expires,
                                     reason=args.reason)
        if host is not None and not drained:
            print(f"jobwarden: error: no registered host named {host!r}", file=sys.stderr)
            return EXIT_NOT_FOUND
        what = f"host {host}" if host else f"pool {pool}"
        if not args.json:
            expiry = "until resumed" if args.expires == 0 else f"for {args.expires:g}s"
            print(f"draining {what} {expiry}: {', '.join(drained) or 'no registered host yet'}")
        if args.wait is None:
            if args.json:
                print_json({"draining": drained})
            return EXIT_OK
        idle, running, waited = _wait(client, drained, args)
    if args.json:
        print_json({"draining": drained, "idle": idle, "running": running,
                    "waited_seconds": round(waited, 3)})
    elif idle:
        print(f"{what} is idle after {waited:.1f}s")
    else:
        left = sum(running.values())
        print(f"timed out after {waited:.1f}s: {left} job(s) still running", file=sys.stderr)
    return EXIT_OK if idle else EXIT_TIMEOUT


def _wait(client: Client, hosts: list[str],
          args: argparse.Namespace) -> tuple[bool, dict[str, int], float]:
    started = time.monotonic()
    last: list[dict[str, int]] = [{}]
    shown: list[str] = [""]

    def progress(running: dict[str, int]) -> None:
        last[0] = running
        if args.json:
            return
        line = _progress_line(running, time.monotonic() - started)
        if line.split("]", 1)[1] != shown[0]:
            shown[0] = line.split("]", 1)[1]
            print(line, flush=True)

    idle = client.hosts.wait_idle(hosts, timeout=args.wait, interval=min(args.interval, 1.0),
                                  on_progress=progress)
    return idle, last[0], time.monotonic() - started


def cmd_resume(args: argparse.Namespace) -> int:
    host, pool = _resolve_target(args)
    with common.client(args) as client:
        resumed = client.hosts.resume(host=host, pool=pool)
    if host is not None and not resumed:
        print(f"jobwarden: error: no registered host named {host!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if args.json:
        print_json({"resumed": resumed})
    else:
        print(f"resumed: {', '.join(resumed) or 'no registered host'}")
    return EXIT_OK


def cmd_tick(args: argparse.Namespace) -> int:
    from jobwarden.assembly import build_ticker
    from jobwarden.db.database import Database

    # A tick reads only what selects its jobs from the worker's variables: it runs
    # one job at a time, serves no HTTP and keeps the default timings.
    apps = tuple(m.strip() for group in args.app for m in group.split(",") if m.strip()) or \
        settings.env_csv("JOBWARDEN_APPS")
    common.import_apps(apps)
    queues = tuple(q.strip() for q in args.queues.split(",") if q.strip()) if args.queues \
        else settings.env_csv("JOBWARDEN_QUEUES")
    config = settings.WorkerSettings(
        apps=apps, queues=queues, concurrency=1, prefetch=0,
        host=args.host or settings.default_host_name(),
        pool=args.pool or settings.env_text("JOBWARDEN_POOL", "default"),
    )
    db = Database(common.dsn(args), schema=common.schema(args), min_size=1, max_size=4,
                  verify=True)
    try:
        ticker = build_ticker(db, config)
        try:
            result = ticker.run(max_jobs=args.max_jobs, timeout=args.timeout)
        except errors.JobwardenError:
            raise
        except Exception as exc:
            logging.getLogger("jobwarden.tick").exception("tick failed")
            print(f"jobwarden: tick failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        finally:
            ticker.close()
    finally:
        db.close()
    if args.json:
        print_json(result.as_json())
    elif result.skipped:
        print(f"skipped: a tick is already running on {result.host}")
    else:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())) or "none"
        print(f"tick on {result.host}: ran {result.ran} job(s) ({outcomes}), reaped "
              f"{result.reaped}, stopped: {result.stopped}")
    return EXIT_OK


# -- the hosts part of `jobwarden status` -------------------------------------------------


def hosts_json(client: Client) -> list[dict[str, Any]]:
    return [h.as_json() for h in client.hosts.status()]


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _drain_text(host: HostStatus) -> str:
    if not host.draining:
        return "no"
    until = f" until {host.drain_expires_at.isoformat(timespec='seconds')}" \
        if host.drain_expires_at else ""
    return f"yes ({host.drain_reason or 'drain'}{until})"


def print_hosts(client: Client) -> None:
    """The HOSTS table of ``jobwarden status``."""
    found = client.hosts.status()
    print()
    if not found:
        print("no registered hosts")
        return
    print_table(
        ["HOST", "POOL", "STATE", "RUNNING", "CAP", "PROCESSES", "DRAINING", "LAST SEEN",
         "VERSION"],
        [[h.name, h.pool, h.state, h.running, h.cap or "-", h.processes, _drain_text(h),
          _ago(h.seen_seconds_ago), h.code_version or "-"] for h in found],
    )
