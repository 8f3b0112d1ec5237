"""Schedule definitions checked before anything is stored: pure, no database.

Every writer (the operator, code sync, the CLI) validates here, once, and gets
a normalised :class:`~jobwarden.structs.schedules.ScheduleSpec` with its
``spec_hash``; the store applies a validated spec and never parses it again.
Bad input raises :class:`~jobwarden.schedules.ScheduleError` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from jobwarden import definitions, errors, textrules
from jobwarden.digests import sha256_hex
from jobwarden.schedules import expressions, planning, walltime
from jobwarden.schedules.errors import ScheduleError
from jobwarden.structs import podruns, policies
from jobwarden.structs.schedules import ScheduleSpec

__all__ = ["MAX_CATCH_UP", "MAX_EXPRESSION_LENGTH", "MAX_NAME_LENGTH", "MAX_SOURCE_LENGTH",
           "compute_spec_hash", "validate"]

JobRef = definitions.JobRef

#: Names: what a Kubernetes name, a namespace-qualified name or a Python identifier uses.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$")
#: Room for ``<namespace>/<name>`` of a Kubernetes resource (63 + 1 + 253).
MAX_NAME_LENGTH = 320
#: The longest cron expression, interval or time zone name accepted.
MAX_EXPRESSION_LENGTH = 256
MAX_SOURCE_LENGTH = 64
MAX_CATCH_UP = 1000
_INT32 = 2**31 - 1


def _fail(name: str, message: str, field: str | None = None) -> ScheduleError:
    return ScheduleError(f"schedule {name!r}: {message}", field=field, detail=message)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"a schedule name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ScheduleError(f"schedule name is {len(name)} characters; "
                            f"at most {MAX_NAME_LENGTH} are allowed")
    if not _NAME.match(name):
        raise ScheduleError(
            f"schedule name {name!r} may only contain letters, digits and . _ - : / @ +, "
            "starting with a letter or digit"
        )
    return name


def _int(name: str, field: str, value: object, *, low: int, high: int = _INT32,
         argument: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"{field} must be a whole number, got {value!r}", argument)
    if value < low:
        raise _fail(name, f"{field} must be at least {low}, got {value}", argument)
    if value > high:
        raise _fail(name, f"{field} must be at most {high}, got {value}", argument)
    return value


def _job_path(name: str, job: JobRef) -> tuple[str, type[definitions.Job] | None]:
    # Only the shape of a path: the schedule's job may live only in the workers.
    try:
        path, cls = definitions.reference(job, must_import=False, try_import=False)
    except errors.UnknownJob as exc:
        raise _fail(name, str(exc), "job_class") from None
    if len(path) > 512:
        raise _fail(name, "job class path is longer than 512 characters", "job_class")
    return path, cls


def _checked_data(name: str, job: JobRef, cls: type[definitions.Job] | None, data: Any, *,
                  may_import: bool) -> Any:
    """Data checked against the job's data type or signature where the code imports.

    A job named by path is only checked (its data is kept as given, so hosts with
    and without the code compute the same definition); a class or @job function is
    also encoded (a dataclass instance becomes its JSON form).
    """
    target = cls
    if isinstance(job, str):
        if not may_import:
            return data
        try:
            target = definitions.resolve(job)
        except errors.UnknownJob:
            return data  # the code lives only in the workers: the shape check is all
    if target is None:
        return data
    try:
        encoded = definitions.encode_data(target, data)
    except errors.InvalidJobData as exc:
        raise _fail(name, str(exc), "data") from None
    return data if isinstance(job, str) else encoded


def compute_spec_hash(fields: dict[str, Any]) -> str:
    """A stable hash of a definition: the same on every host, Python version and cluster."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return sha256_hex(text)[:32]


def validate(
    name: str, *, cron: str | None = None, interval: str | None = None,
    timezone: str = "UTC", job_class: JobRef, data: Any = None, queue: str | None = None,
    priority: int | None = None, timeout_seconds: float | None = None,
    max_retries: int | None = None, idempotent: bool | None = None, catch_up: str = "latest",
    catch_up_window_seconds: int = 3600, catch_up_max: int = 10, overlap: str = "Allow",
    suspended: bool = False, source: str = "code", origin: str | None = None,
    pod_run: str | None = None,
) -> ScheduleSpec:
    """Check a definition and return it normalised; raise ScheduleError naming what is wrong.

    Pure (no database): the operator can use it to validate a resource before it
    writes anything. A job given as a class (or ``@job`` function) fills the
    unset queue, priority, timeout, retries and idempotency from the class, so
    every runner enqueues identical jobs whether or not it can import the class.
    """
    name = _check_name(name)
    # Expressions are short; a long one is refused before any message quotes it
    # (a 10 KB string must not come back in full in an error, a log or a status).
    for field, text, argument in (("cron expression", cron, "expression"),
                                  ("interval", interval, "expression"),
                                  ("time zone", timezone, "timezone")):
        if isinstance(text, str):
            if len(text) > MAX_EXPRESSION_LENGTH:
                raise _fail(name, f"{field} is {len(text)} characters; at most "
                                  f"{MAX_EXPRESSION_LENGTH} are allowed", argument)
            if textrules.problem(text):
                raise _fail(name, f"{field} {textrules.problem(text)}", argument)
    if timezone is None or not isinstance(timezone, str):
        raise _fail(name, f"time zone must be an IANA name such as 'Europe/Berlin', "
                          f"got {timezone!r}", "timezone")
    try:
        walltime.load_zone(timezone)  # first, so a bad zone is reported as the zone's fault
    except ScheduleError as exc:
        raise _fail(name, str(exc), "timezone") from None
    try:
        expr = expressions.parse(cron, interval=interval, timezone=timezone)
    except ScheduleError as exc:
        raise _fail(name, str(exc), "expression") from None
    path, cls = _job_path(name, job_class)
    # Resources applied to the cluster never make the operator import modules they name.
    data = _checked_data(name, job_class, cls, data, may_import=source in ("code", "cli"))
    try:
        json.dumps(data, allow_nan=False)
        textrules.check_json_text(data)
    except (TypeError, ValueError) as exc:
        raise _fail(name, f"job data must be JSON-serialisable: {exc}", "data") from None
    if queue is None and cls is not None:
        queue = cls.queue
    if queue is not None and (not isinstance(queue, str) or not 1 <= len(queue) <= 128
                              or queue.strip() != queue or textrules.problem(queue)):
        shown = textrules.echo(queue) if isinstance(queue, str) else repr(queue)
        raise _fail(name, f"queue must be a non-blank name of at most 128 characters "
                          f"(no NUL, valid Unicode), got {shown}", "queue")
    if priority is None and cls is not None:
        priority = cls.priority
    if priority is not None:
        priority = _int(name, "priority", priority, low=-_INT32 - 1, argument="priority")
    if timeout_seconds is None and cls is not None:
        timeout_seconds = float(cls.timeout)
    if timeout_seconds is not None:
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) \
                or not math.isfinite(timeout_seconds) or timeout_seconds <= 0:
            raise _fail(name, f"timeout_seconds must be a positive number, "
                              f"got {timeout_seconds!r}", "timeout_seconds")
        timeout_seconds = float(timeout_seconds)
    if max_retries is None and cls is not None:
        max_retries = cls.max_retries
    if max_retries is not None:
        max_retries = _int(name, "max_retries", max_retries, low=0, argument="max_retries")
    if idempotent is None and cls is not None:
        idempotent = cls.idempotent
    if idempotent is not None and not isinstance(idempotent, bool):
        raise _fail(name, f"idempotent must be true or false, got {idempotent!r}")
    if catch_up not in policies.CATCH_UPS:
        allowed = ", ".join(repr(mode) for mode in policies.CATCH_UPS)
        raise _fail(name, f"catch-up must be one of {allowed}, got {catch_up!r}", "catch_up")
    window = _int(name, "catch-up window (seconds)", catch_up_window_seconds,
                  low=planning.MIN_WINDOW_SECONDS, argument="catch_up_window_seconds")
    cap = _int(name, "catch-up max", catch_up_max, low=1, high=MAX_CATCH_UP,
               argument="catch_up_max")
    try:
        planning.validate_catch_up(catch_up=catch_up, window_seconds=window, max_catch_up=cap)
    except ScheduleError as exc:
        raise _fail(name, str(exc), "catch_up") from None
    policy = next((p for p in policies.OVERLAPS if isinstance(overlap, str) and p.lower() ==
                   overlap.lower()), None)
    if policy is None:
        allowed = ", ".join(policies.OVERLAPS)
        raise _fail(name, f"overlap policy must be one of {allowed}, got {overlap!r}",
                    "overlap")
    if not isinstance(suspended, bool):
        raise _fail(name, f"suspended must be true or false, got {suspended!r}", "suspended")
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_LENGTH:
        raise _fail(name, f"source must be a non-blank label of at most {MAX_SOURCE_LENGTH} "
                          f"characters, got {source!r}")
    if origin is not None and (not isinstance(origin, str) or len(origin) > 512):
        raise _fail(name, "origin must be a string of at most 512 characters")
    if pod_run is not None and (found := podruns.pod_run_problem(pod_run)) is not None:
        raise _fail(name, f"pod_run {found}")

    interval_seconds = expr.seconds if isinstance(expr, expressions.IntervalExpression) else None
    cron_text = expr.cron if isinstance(expr, expressions.CronExpression) else None
    fields: dict[str, Any] = {
        "expression": expr.canonical(), "job_class": path, "data": data, "queue": queue,
        "priority": priority, "timeout_seconds": timeout_seconds, "max_retries": max_retries,
        "idempotent": idempotent, "catch_up": catch_up, "catch_up_window_seconds": window,
        "catch_up_max": cap, "overlap": policy, "suspended": suspended,
    }
    if pod_run is not None:
        # Only when set: every pool schedule keeps the hash it had before pod runs.
        fields["pod_run"] = pod_run
    hashed = compute_spec_hash(fields)
    return ScheduleSpec(
        name=name, expression=expr.canonical(), cron=cron_text,
        interval=expressions.format_interval(interval_seconds) if interval_seconds else None,
        interval_seconds=interval_seconds,
        timezone=expr.timezone if isinstance(expr, expressions.CronExpression) else "UTC",
        job_class=path, data=data,
        queue=queue, priority=priority, timeout_seconds=timeout_seconds,
        max_retries=max_retries, idempotent=idempotent, catch_up=catch_up,
        catch_up_window_seconds=window, catch_up_max=cap, overlap=policy,
        suspended=suspended, source=source, origin=origin, spec_hash=hashed, pod_run=pod_run,
    )
