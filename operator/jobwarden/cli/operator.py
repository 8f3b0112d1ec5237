"""``jobwarden operator``: the kopf operator (JobSchedule, ExclusiveJob) and its periodic work.

Configured by the environment the Helm chart sets (docs/kubernetes.md, "The
operator's contract with the chart"); the flags here override it for local
runs. The DSN comes from ``--dsn``, ``JOBWARDEN_DSN`` or the file named by
``JOBWARDEN_DSN_FILE`` and is never printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Any

from jobwarden.cli import arguments, common


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "operator", help="run the Kubernetes operator",
        description="Reconcile JobSchedule and ExclusiveJob resources into the database, "
                    "mirror the database into their status, run the schedule runner, the "
                    "reaper and the database-wide gauges (docs/operator.md).",
    )
    parser.add_argument("--namespaces", default=None,
                        help="namespaces to watch, comma-separated (default "
                             "$JOBWARDEN_NAMESPACES; empty = all)")
    parser.add_argument("--http-port", type=arguments.port, default=None,
                        help="port of /metrics, /healthz, /readyz (default "
                             "$JOBWARDEN_HTTP_PORT or 8080)")
    parser.add_argument("--peering", default=None,
                        help="kopf peering name (default $JOBWARDEN_PEERING; empty = standalone)")
    parser.add_argument("--cluster", default=None,
                        help="this cluster's id, the source of its schedule rows "
                             "(default $JOBWARDEN_CLUSTER or 'default')")
    parser.add_argument("--no-migrate", action="store_true",
                        default=os.environ.get("JOBWARDEN_MIGRATE", "true").lower()
                        in ("0", "false", "no"),
                        help="do not apply pending database migrations at start")
    parser.add_argument("--operator-log-format", dest="operator_log_format",
                        choices=["text", "json"],
                        default=os.environ.get("JOBWARDEN_LOG_FORMAT") or None,
                        help="log format (default $JOBWARDEN_LOG_FORMAT, else --log-format)")
    parser.set_defaults(handler=cmd_operator)


def cmd_operator(args: argparse.Namespace) -> int:
    from jobwarden.cli import setup_logging
    from jobwarden.controller.app import Operator, install_redaction
    from jobwarden.controller.config import OperatorConfig
    from jobwarden.db.database import Database

    level = (os.environ.get("JOBWARDEN_LOG_LEVEL") or args.log_level).upper()
    if level == "WARN":
        level = "WARNING"
    setup_logging(level, args.operator_log_format or args.log_format)
    if level != "DEBUG":
        # kopf logs every timer pass per object at INFO ("Timer 'mirror' succeeded"):
        # with a status refresh every few seconds that drowns everything else.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    dsn = common.dsn(args)
    install_redaction(dsn)
    config = OperatorConfig.from_env()
    overrides: dict[str, Any] = {}
    if args.namespaces is not None:
        overrides["namespaces"] = tuple(p.strip() for p in args.namespaces.split(",")
                                        if p.strip())
    if args.http_port is not None:
        overrides["http_port"] = args.http_port
    if args.peering is not None:
        overrides["peering"] = args.peering
    if args.cluster is not None:
        overrides["cluster"] = args.cluster
    if args.schema:
        overrides["schema"] = args.schema
    config = dataclasses.replace(config, **overrides)
    db = Database(dsn, schema=config.schema, min_size=2, max_size=12, verify=True,
                  application_name=f"jobwarden-operator:{config.pod_name}"[:63])
    try:
        if not args.no_migrate:
            applied = db.migrate()
            if applied:
                logging.getLogger("jobwarden.controller").info(
                    "applied migrations: %s", ", ".join(applied))
        common.check_schema_current(db)
        return Operator(db, config).run()
    finally:
        db.close()
