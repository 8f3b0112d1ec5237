"""``jobwarden run-job``: run one pod run's claimed job in this process (the pod's command).

Reads the claim the operator handed the pod from the environment (flags
override), checks it before anything is touched, and hands over to
:mod:`jobwarden.podruns.runjob`. Bad or missing input is one line and exit 9 (a
bad ``JOBWARDEN_*`` value) or 2 (a bad flag), and nothing is changed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
from typing import TYPE_CHECKING, Any

from jobwarden import errors, settings
from jobwarden.cli import arguments, common
from jobwarden.cli.worker import _csv
from jobwarden.observability import logfields

if TYPE_CHECKING:  # imported when the command runs: the CLI loads every command module
    from jobwarden.podruns.runjob import RunJobSettings

logger = logging.getLogger("jobwarden.cli")


def _claim_token(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a claim token (a UUID): "
                                         f"{arguments.echo(text)}") from None


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run-job", help="run one pod run's claimed job (the command of a pod-per-run pod)",
        description="Run the job the operator claimed for this pod: start under the claim "
                    "(fenced), heartbeat, renew the lease, record the outcome, exit with a "
                    "code that says what was recorded (docs/cli.md). Durations take seconds "
                    "or a unit: 90s, 15m, 1h.",
    )
    parser.add_argument("--job-id", type=arguments.job_id, default=None,
                        help="the claimed job (default: $JOBWARDEN_JOB_ID)")
    parser.add_argument("--claim-token", type=_claim_token, default=None,
                        help="the claim's token (default: $JOBWARDEN_CLAIM_TOKEN)")
    parser.add_argument("--lease-token", type=arguments.fencing_token, default=None,
                        help="the fencing token of the lease taken at claim (default: "
                             "$JOBWARDEN_LEASE_TOKEN; none when the claim took no lease)")
    parser.add_argument("--app", type=_csv, action="append", default=[],
                        help="module(s) defining jobs and hooks, comma-separated "
                             "(repeatable); default $JOBWARDEN_APPS")
    parser.add_argument("--host", type=arguments.name,
                        help="this pod's name, recorded as the attempt's host "
                             "(default: $JOBWARDEN_HOST, $POD_NAME, hostname)")
    for flag, env, default, text in (
        ("--heartbeat-interval", "JOBWARDEN_HEARTBEAT_INTERVAL", 5.0,
         "how often the claim is heartbeated and the lease renewed"),
        ("--heartbeat-grace", "JOBWARDEN_HEARTBEAT_GRACE", 60.0,
         "the claim is reaped after this long without a heartbeat"),
        ("--stop-grace", "JOBWARDEN_STOP_GRACE", 20.0,
         "after SIGTERM, how long the job may take to finish before it is stopped "
         "(keep it below the pod's terminationGracePeriodSeconds)"),
    ):
        parser.add_argument(flag, type=arguments.positive_duration, default=None,
                            metavar="DURATION", help=f"{text} (default: ${env} or {default:g}s)")
    parser.add_argument("--failure-hook", default=None,
                        help="module:function called for a failed attempt "
                             "(default: $JOBWARDEN_FAILURE_HOOK, else none)")
    parser.add_argument("--result-max-bytes", type=arguments.positive_int, default=65536,
                        help="a stored result larger than this is truncated")
    parser.set_defaults(handler=cmd_run_job)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 0 < value < 2**63:  # job ids and fencing tokens are bigint
        raise errors.ConfigurationError(
            f"{name} must be a whole number from 1 to {2**63 - 1}, not {arguments.echo(raw)}")
    return value


def _env_token(name: str) -> uuid.UUID | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise errors.ConfigurationError(
            f"{name} must be a claim token (a UUID), not {arguments.echo(raw)}") from None


def run_job_settings(args: argparse.Namespace) -> RunJobSettings:
    """The flags, else their environment variables, else the defaults (docs/cli.md)."""
    from jobwarden.podruns.runjob import RunJobSettings

    job_id = args.job_id or _env_int("JOBWARDEN_JOB_ID")
    if job_id is None:
        raise errors.ConfigurationError("no job to run: set JOBWARDEN_JOB_ID (or --job-id)")
    token = args.claim_token or _env_token("JOBWARDEN_CLAIM_TOKEN")
    if token is None:
        raise errors.ConfigurationError(
            "no claim token: set JOBWARDEN_CLAIM_TOKEN (or --claim-token)")
    lease_token = args.lease_token or _env_int("JOBWARDEN_LEASE_TOKEN")

    def seconds(flag: str, env: str, default: float) -> float:
        given: float | None = getattr(args, flag)
        value = given if given is not None else settings.env_duration(env, default)
        if value <= 0:
            raise errors.ConfigurationError(f"{env} must be more than 0s")
        return value

    apps = tuple(m for group in args.app for m in group) or _csv(
        os.environ.get("JOBWARDEN_APPS", ""))
    worker = settings.WorkerSettings(
        concurrency=1, prefetch=0, host=args.host or settings.default_host_name(),
        heartbeat_interval=seconds("heartbeat_interval", "JOBWARDEN_HEARTBEAT_INTERVAL", 5.0),
        heartbeat_grace=seconds("heartbeat_grace", "JOBWARDEN_HEARTBEAT_GRACE", 60.0),
        apps=apps, failure_hook=args.failure_hook or os.environ.get("JOBWARDEN_FAILURE_HOOK"),
        result_max_bytes=args.result_max_bytes, schedule_check_seconds=0, gauge_interval=0)
    return RunJobSettings(job_id=job_id, claim_token=token, lease_token=lease_token,
                          stop_grace=seconds("stop_grace", "JOBWARDEN_STOP_GRACE", 20.0),
                          worker=worker)


def cmd_run_job(args: argparse.Namespace) -> int:
    from jobwarden.assembly import build_pod_run_worker
    from jobwarden.db.database import Database
    from jobwarden.podruns import runjob

    config = run_job_settings(args)
    logfields.set_process_host(config.worker.host)
    dsn = common.dsn(args)
    common.import_apps(config.worker.apps)
    db = Database(dsn, schema=common.schema(args), min_size=1, max_size=4,
                  application_name=f"jobwarden-run-job:{config.worker.host}"[:63])
    try:
        common.check_schema_current(db)
        # The worker's parts first (a bad failure hook is exit 9 with nothing changed),
        # then the fenced start: only a valid claim is marked started.
        worker = build_pod_run_worker(db, config.worker, lease_token=config.lease_token)
        row = runjob.start(db, config)
        if row is None:
            worker.isolation.close()
            worker.outcomes.close()
            print(f"jobwarden: error: the claim of job {config.job_id} is no longer valid "
                  "(reaped, claimed again, finished or cancelled): not run", file=sys.stderr)
            return runjob.EXIT_FENCED
        return runjob.run_job(worker, row, config)
    finally:
        db.close()
