"""``jobwarden worker``: run a worker process until SIGTERM."""

from __future__ import annotations

import argparse
import os
from typing import Any

from jobwarden import settings
from jobwarden.cli import common


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker", help="run a worker process",
        description="Claim and run jobs until SIGTERM (then drain and exit).",
    )
    parser.add_argument("--app", type=_csv, action="append", default=[],
                        help="module(s) defining jobs, comma-separated (repeatable); "
                             "default $JOBWARDEN_APPS")
    parser.add_argument("--queues", type=_csv, default=None,
                        help="queues to work, comma-separated (default: all; $JOBWARDEN_QUEUES)")
    parser.add_argument("--concurrency", type=int,
                        default=int(os.environ.get("JOBWARDEN_CONCURRENCY", "10")))
    parser.add_argument("--prefetch", type=int, default=None,
                        help="claimed-but-unstarted jobs kept ready (default: = concurrency)")
    parser.add_argument("--host", help="host name (default: $JOBWARDEN_HOST, $POD_NAME, hostname)")
    parser.add_argument("--pool", default=os.environ.get("JOBWARDEN_POOL", "default"))
    parser.add_argument("--host-cap", type=int, default=None,
                        help="most jobs at once on this host across its processes "
                             "(default: $JOBWARDEN_HOST_CAP, else the pool's cap; 0 = none)")
    parser.add_argument("--http-port", type=int,
                        default=int(os.environ["JOBWARDEN_HTTP_PORT"])
                        if os.environ.get("JOBWARDEN_HTTP_PORT") else None,
                        help="serve /metrics, /healthz, /readyz on this port")
    parser.add_argument("--isolation", choices=["thread", "process"],
                        default=os.environ.get("JOBWARDEN_ISOLATION", "thread"))
    parser.add_argument("--poll-interval", type=float,
                        default=_env_float("JOBWARDEN_POLL_INTERVAL", 1.0))
    parser.add_argument("--heartbeat-interval", type=float,
                        default=_env_float("JOBWARDEN_HEARTBEAT_INTERVAL", 5.0))
    parser.add_argument("--heartbeat-grace", type=float,
                        default=_env_float("JOBWARDEN_HEARTBEAT_GRACE", 60.0))
    parser.add_argument("--reap-interval", type=float,
                        default=_env_float("JOBWARDEN_REAP_INTERVAL", 10.0))
    parser.add_argument("--shutdown-grace", type=float,
                        default=_env_float("JOBWARDEN_SHUTDOWN_GRACE", 30.0),
                        help="seconds running jobs may take after SIGTERM")
    parser.add_argument("--failure-hook", default=os.environ.get("JOBWARDEN_FAILURE_HOOK"),
                        help="module:function called for every failed attempt")
    parser.add_argument("--result-max-bytes", type=int, default=65536)
    parser.add_argument("--schedule-check-seconds", type=float,
                        default=_env_float("JOBWARDEN_SCHEDULE_CHECK_SECONDS", 15.0),
                        help="run due schedules at most this often (0 = off)")
    parser.set_defaults(handler=cmd_worker)


def worker_settings(args: argparse.Namespace) -> settings.WorkerSettings:
    apps = tuple(m for group in args.app for m in group) or _csv(
        os.environ.get("JOBWARDEN_APPS", ""))
    queues = args.queues if args.queues is not None else _csv(
        os.environ.get("JOBWARDEN_QUEUES", ""))
    return settings.WorkerSettings(
        queues=queues, concurrency=args.concurrency, prefetch=args.prefetch,
        isolation=args.isolation, host=args.host or settings.default_host_name(),
        pool=args.pool, host_cap=args.host_cap, http_port=args.http_port,
        poll_interval=args.poll_interval,
        heartbeat_interval=args.heartbeat_interval, heartbeat_grace=args.heartbeat_grace,
        reap_interval=args.reap_interval, shutdown_grace=args.shutdown_grace, apps=apps,
        failure_hook=args.failure_hook, result_max_bytes=args.result_max_bytes,
        schedule_check_seconds=args.schedule_check_seconds,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from jobwarden.assembly import build_worker
    from jobwarden.db.database import Database

    config = worker_settings(args)
    db = Database(common.dsn(args), schema=common.schema(args), min_size=2,
                  application_name=f"jobwarden-worker:{config.host}"[:63],
                  max_size=max(4, min(config.concurrency + 4, 20)))
    try:
        worker = build_worker(db, config)
        return worker.run()
    finally:
        db.close()
