"""``jobwarden worker``: run a worker process until SIGTERM."""

from __future__ import annotations

import argparse
import errno
import logging
import signal
from typing import Any

from jobwarden import errors, settings
from jobwarden.cli import EXIT_INTERRUPTED, EXIT_OK, arguments, common
from jobwarden.observability import logfields

logger = logging.getLogger("jobwarden.cli")


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker", help="run a worker process",
        description="Claim and run jobs until SIGTERM (then drain and exit). Durations "
                    "take seconds or a unit: 90s, 15m, 1h.",
    )
    parser.add_argument("--app", type=_csv, action="append", default=[],
                        help="module(s) defining jobs, comma-separated (repeatable); "
                             "default $JOBWARDEN_APPS")
    parser.add_argument("--queues", type=_csv, default=None,
                        help="queues to work, comma-separated (default: all; $JOBWARDEN_QUEUES)")
    parser.add_argument("--concurrency", type=arguments.positive_int, default=None,
                        help="jobs at once in this process (default: $JOBWARDEN_CONCURRENCY "
                             "or 10)")
    parser.add_argument("--prefetch", type=arguments.non_negative_int, default=None,
                        help="claimed-but-unstarted jobs kept ready (default: automatic, "
                             "about 0.1 s of work)")
    parser.add_argument("--host", type=arguments.name,
                        help="host name (default: $JOBWARDEN_HOST, $POD_NAME, hostname)")
    parser.add_argument("--pool", type=arguments.name, default=None,
                        help="worker pool (default: $JOBWARDEN_POOL or default)")
    parser.add_argument("--host-cap", type=arguments.non_negative_int, default=None,
                        help="most jobs at once on this host across its processes "
                             "(default: $JOBWARDEN_HOST_CAP, else the pool's cap; 0 = none)")
    parser.add_argument("--http-port", type=arguments.port, default=None,
                        help="serve /metrics, /healthz, /readyz on this port "
                             "(default: $JOBWARDEN_HTTP_PORT, else no HTTP server)")
    parser.add_argument("--isolation", choices=["thread", "process"], default=None,
                        help="run jobs in threads or child processes "
                             "(default: $JOBWARDEN_ISOLATION or thread)")
    for flag, env, default, text in (
        ("--poll-interval", "JOBWARDEN_POLL_INTERVAL", 1.0, "idle poll period"),
        ("--heartbeat-interval", "JOBWARDEN_HEARTBEAT_INTERVAL", 5.0,
         "how often running claims are heartbeated"),
        ("--heartbeat-grace", "JOBWARDEN_HEARTBEAT_GRACE", 60.0,
         "a claim without a heartbeat this long is reaped"),
        ("--reap-interval", "JOBWARDEN_REAP_INTERVAL", 10.0, "how often this process reaps"),
        ("--shutdown-grace", "JOBWARDEN_SHUTDOWN_GRACE", 30.0,
         "how long running jobs may take after SIGTERM"),
        ("--schedule-check-seconds", "JOBWARDEN_SCHEDULE_CHECK_SECONDS", 15.0,
         "run due schedules at most this often, 0 = off"),
        ("--gauge-interval", "JOBWARDEN_GAUGE_INTERVAL", 15.0,
         "with --http-port: export queue depth and the other database-wide gauges this "
         "often while holding the gauge lease, 0 = never"),
    ):
        parser.add_argument(flag, type=arguments.duration, default=None, metavar="DURATION",
                            help=f"{text} (default: ${env} or {default:g}s)")
    parser.add_argument("--idle-interval", type=arguments.positive_duration, default=None,
                        metavar="DURATION",
                        help="at rest (LISTEN verified, nothing claimed) polls back off to "
                             "this, and the host refresh and the reaper run this often "
                             "(default: $JOBWARDEN_IDLE_INTERVAL, else 60 x the poll "
                             "interval: 60s)")
    parser.add_argument("--listen-dsn", default=None,
                        help="a direct DSN for the LISTEN connection, beside a "
                             "transaction-mode pooler's --dsn (default: "
                             "$JOBWARDEN_LISTEN_DSN, else the --dsn)")
    parser.add_argument("--failure-hook", default=None,
                        help="module:function called for every failed attempt "
                             "(default: $JOBWARDEN_FAILURE_HOOK, else none)")
    parser.add_argument("--result-max-bytes", type=arguments.positive_int, default=65536,
                        help="stored results larger than this are truncated")
    parser.set_defaults(handler=cmd_worker)


def worker_settings(args: argparse.Namespace) -> settings.WorkerSettings:
    """The flags, else their environment variables, else the defaults (docs/cli.md)."""
    return settings.WorkerSettings.from_env(
        apps=tuple(m for group in args.app for m in group) or None, queues=args.queues,
        concurrency=args.concurrency, prefetch=args.prefetch, isolation=args.isolation,
        host=args.host, pool=args.pool, host_cap=args.host_cap, http_port=args.http_port,
        poll_interval=args.poll_interval, heartbeat_interval=args.heartbeat_interval,
        heartbeat_grace=args.heartbeat_grace, reap_interval=args.reap_interval,
        shutdown_grace=args.shutdown_grace, failure_hook=args.failure_hook or None,
        result_max_bytes=args.result_max_bytes,
        schedule_check_seconds=args.schedule_check_seconds,
        gauge_interval=args.gauge_interval,
        idle_interval=args.idle_interval,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from jobwarden.assembly import build_worker
    from jobwarden.db.database import Database

    config = worker_settings(args)
    logfields.set_process_host(config.host)
    common.import_apps(config.apps)
    if not config.apps:
        logger.warning("no --app (or $JOBWARDEN_APPS): this worker knows no job classes up "
                       "front; each job's module is imported from its path when it runs")
    # No pooled connection kept at rest: an idle worker holds its LISTEN connection,
    # which serves its few calls a minute (Pool.trim, db.Listener; issue 31).
    db = Database(common.dsn(args), schema=common.schema(args), min_size=0, max_idle=10.0,
                  application_name=f"jobwarden-worker:{config.host}"[:63],
                  max_size=max(4, min(config.concurrency + 4, 20)),
                  listen_dsn=args.listen_dsn or settings.env_listen_dsn())
    try:
        common.check_schema_current(db)
        try:
            worker = build_worker(db, config)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise errors.ConfigurationError(
                f"--http-port {config.http_port} is already in use on {config.http_host}: "
                "pick another port (or stop what listens there)") from None
        code = worker.run()
        # Ctrl-C drains like SIGTERM, and then says so as a shell does (docs/cli.md);
        # SIGTERM (Kubernetes stopping the pod) is a normal stop, 0.
        if code == EXIT_OK and worker.stop_signal == signal.SIGINT:
            return EXIT_INTERRUPTED
        return code
    finally:
        db.close()
