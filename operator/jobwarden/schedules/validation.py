"""Schedule definitions checked before anything is stored: pure, no database.

Every writer (the operator, code sync, the CLI) validates here, once, and gets
a normalised :class:`~jobwarden.structs.schedules.ScheduleDefinition` with its
``spec_hash``; the store applies a validated spec and never parses it again.
Bad input raises :class:`~jobwarden.schedules.ScheduleError` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NamedTuple

from jobwarden import errors, textrules
from jobwarden.jobs import definitions
from jobwarden.schedules import expressions, planning, walltime
from jobwarden.schedules.errors import ScheduleError
from jobwarden.structs import podruns, policies
from jobwarden.structs.digests import sha256_hex
from jobwarden.structs.policies import CatchUp, Overlap
from jobwarden.structs.schedules import ScheduleDefinition

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


class _JobOptions(NamedTuple):
    """The job options of a definition, the class's values filled in where unset."""

    queue: str | None
    priority: int | None
    timeout_seconds: float | None
    max_retries: int | None
    idempotent: bool | None


class _CatchUpSettings(NamedTuple):
    catch_up: CatchUp
    window_seconds: int
    catch_up_max: int


def validate(
    name: str, *, cron: str | None = None, interval: str | None = None,
    timezone: str = "UTC", job_class: JobRef, data: Any = None, queue: str | None = None,
    priority: int | None = None, timeout_seconds: float | None = None,
    max_retries: int | None = None, idempotent: bool | None = None, catch_up: str = "latest",
    catch_up_window_seconds: int = 3600, catch_up_max: int = 10, overlap: str = "Allow",
    suspended: bool = False, source: str = "code", origin: str | None = None,
    pod_run: str | None = None,
) -> ScheduleDefinition:
    """Check a definition and return it normalised; raise ScheduleError naming what is wrong.

    Pure (no database): the operator can use it to validate a resource before it
    writes anything. A job given as a class (or ``@job`` function) fills the
    unset queue, priority, timeout, retries and idempotency from the class, so
    every runner enqueues identical jobs whether or not it can import the class.
    The checks run in this order, so the first fault of a definition is the one
    reported: name, expression texts, zone, expression, job, data, job options,
    catch-up, overlap, labels.
    """
    name = _check_name(name)
    _check_texts(name, cron=cron, interval=interval, timezone=timezone)
    expr = _expression(name, cron=cron, interval=interval, timezone=timezone)
    path, cls = _job_path(name, job_class)
    # Resources applied to the cluster never make the operator import modules they name.
    data = _checked_data(name, job_class, cls, data, may_import=source in ("code", "cli"))
    _check_json(name, data)
    options = _job_options(name, cls, _JobOptions(
        queue=queue, priority=priority, timeout_seconds=timeout_seconds,
        max_retries=max_retries, idempotent=idempotent))
    catching_up = _catch_up(name, catch_up, window_seconds=catch_up_window_seconds,
                            catch_up_max=catch_up_max)
    policy = _overlap(name, overlap)
    _check_labels(name, suspended=suspended, source=source, origin=origin, pod_run=pod_run)
    return _definition(name, expr, job_class=path, data=data, options=options,
                       catching_up=catching_up, overlap=policy, suspended=suspended,
                       source=source, origin=origin, pod_run=pod_run)


def _check_texts(name: str, *, cron: str | None, interval: str | None, timezone: str) -> None:
    """Expressions are short; a long one is refused before any message quotes it
    (a 10 KB string must not come back in full in an error, a log or a status)."""
    for field, text, argument in (("cron expression", cron, "expression"),
                                  ("interval", interval, "expression"),
                                  ("time zone", timezone, "timezone")):
        if isinstance(text, str):
            if len(text) > MAX_EXPRESSION_LENGTH:
                raise _fail(name, f"{field} is {len(text)} characters; at most "
                                  f"{MAX_EXPRESSION_LENGTH} are allowed", argument)
            if textrules.problem(text):
                raise _fail(name, f"{field} {textrules.problem(text)}", argument)


def _expression(name: str, *, cron: str | None, interval: str | None,
                timezone: str) -> expressions.Expression:
    """The parsed expression; the zone is loaded first, so a bad zone is reported as
    the zone's fault rather than the expression's."""
    if timezone is None or not isinstance(timezone, str):
        raise _fail(name, f"time zone must be an IANA name such as 'Europe/Berlin', "
                          f"got {timezone!r}", "timezone")
    try:
        walltime.load_zone(timezone)
    except ScheduleError as exc:
        raise _fail(name, str(exc), "timezone") from None
    try:
        return expressions.parse(cron, interval=interval, timezone=timezone)
    except ScheduleError as exc:
        raise _fail(name, str(exc), "expression") from None


def _check_json(name: str, data: Any) -> None:
    try:
        json.dumps(data, allow_nan=False)
        textrules.check_json_text(data)
    except (TypeError, ValueError) as exc:
        raise _fail(name, f"job data must be JSON-serialisable: {exc}", "data") from None


def _job_options(name: str, cls: type[definitions.Job] | None,
                 given: _JobOptions) -> _JobOptions:
    """``given`` checked, each unset option taken from the job class when it is known."""
    queue, priority, timeout_seconds, max_retries, idempotent = given
    if cls is not None:
        queue = cls.queue if queue is None else queue
        priority = cls.priority if priority is None else priority
        timeout_seconds = float(cls.timeout) if timeout_seconds is None else timeout_seconds
        max_retries = cls.max_retries if max_retries is None else max_retries
        idempotent = cls.idempotent if idempotent is None else idempotent
    if queue is not None and (not isinstance(queue, str) or not 1 <= len(queue) <= 128
                              or queue.strip() != queue or textrules.problem(queue)):
        shown = textrules.echo(queue) if isinstance(queue, str) else repr(queue)
        raise _fail(name, f"queue must be a non-blank name of at most 128 characters "
                          f"(no NUL, valid Unicode), got {shown}", "queue")
    if priority is not None:
        priority = _int(name, "priority", priority, low=-_INT32 - 1, argument="priority")
    if timeout_seconds is not None:
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) \
                or not math.isfinite(timeout_seconds) or timeout_seconds <= 0:
            raise _fail(name, f"timeout_seconds must be a positive number, "
                              f"got {timeout_seconds!r}", "timeout_seconds")
        timeout_seconds = float(timeout_seconds)
    if max_retries is not None:
        max_retries = _int(name, "max_retries", max_retries, low=0, argument="max_retries")
    if idempotent is not None and not isinstance(idempotent, bool):
        raise _fail(name, f"idempotent must be true or false, got {idempotent!r}")
    return _JobOptions(queue, priority, timeout_seconds, max_retries, idempotent)


def _catch_up(name: str, catch_up: str, *, window_seconds: int,
              catch_up_max: int) -> _CatchUpSettings:
    mode = next((word for word in policies.CATCH_UPS if word == catch_up), None)
    if mode is None:
        allowed = ", ".join(repr(word) for word in policies.CATCH_UPS)
        raise _fail(name, f"catch-up must be one of {allowed}, got {catch_up!r}", "catch_up")
    window = _int(name, "catch-up window (seconds)", window_seconds,
                  low=planning.MIN_WINDOW_SECONDS, argument="catch_up_window_seconds")
    cap = _int(name, "catch-up max", catch_up_max, low=1, high=MAX_CATCH_UP,
               argument="catch_up_max")
    try:
        planning.validate_catch_up(catch_up=mode, window_seconds=window, catch_up_max=cap)
    except ScheduleError as exc:
        raise _fail(name, str(exc), "catch_up") from None
    return _CatchUpSettings(mode, window, cap)


def _overlap(name: str, overlap: str) -> Overlap:
    """The policy ``overlap`` names, in any letter case (CronJob spells them capitalised)."""
    policy = next((p for p in policies.OVERLAPS if isinstance(overlap, str) and p.lower() ==
                   overlap.lower()), None)
    if policy is None:
        allowed = ", ".join(policies.OVERLAPS)
        raise _fail(name, f"overlap policy must be one of {allowed}, got {overlap!r}",
                    "overlap")
    return policy


def _check_labels(name: str, *, suspended: bool, source: str, origin: str | None,
                  pod_run: str | None) -> None:
    if not isinstance(suspended, bool):
        raise _fail(name, f"suspended must be true or false, got {suspended!r}", "suspended")
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_LENGTH:
        raise _fail(name, f"source must be a non-blank label of at most {MAX_SOURCE_LENGTH} "
                          f"characters, got {source!r}")
    if origin is not None and (not isinstance(origin, str) or len(origin) > 512):
        raise _fail(name, "origin must be a string of at most 512 characters")
    if pod_run is not None and (found := podruns.pod_run_problem(pod_run)) is not None:
        raise _fail(name, f"pod_run {found}")


def _definition(name: str, expr: expressions.Expression, *, job_class: str, data: Any,
                options: _JobOptions, catching_up: _CatchUpSettings, overlap: Overlap,
                suspended: bool, source: str, origin: str | None,
                pod_run: str | None) -> ScheduleDefinition:
    """The checked values as a definition, with the hash of what decides its jobs."""
    interval_seconds = expr.seconds if isinstance(expr, expressions.IntervalExpression) else None
    cron_text = expr.cron if isinstance(expr, expressions.CronExpression) else None
    fields: dict[str, Any] = {
        "expression": expr.canonical(), "job_class": job_class, "data": data,
        "queue": options.queue, "priority": options.priority,
        "timeout_seconds": options.timeout_seconds, "max_retries": options.max_retries,
        "idempotent": options.idempotent, "catch_up": catching_up.catch_up,
        "catch_up_window_seconds": catching_up.window_seconds,
        "catch_up_max": catching_up.catch_up_max, "overlap": overlap, "suspended": suspended,
    }
    if pod_run is not None:
        # Only when set: every pool schedule keeps the hash it had before pod runs.
        fields["pod_run"] = pod_run
    return ScheduleDefinition(
        name=name, expression=expr.canonical(), cron=cron_text,
        interval=expressions.format_interval(interval_seconds) if interval_seconds else None,
        interval_seconds=interval_seconds,
        timezone=expr.timezone if isinstance(expr, expressions.CronExpression) else "UTC",
        job_class=job_class, data=data, queue=options.queue, priority=options.priority,
        timeout_seconds=options.timeout_seconds, max_retries=options.max_retries,
        idempotent=options.idempotent, catch_up=catching_up.catch_up,
        catch_up_window_seconds=catching_up.window_seconds,
        catch_up_max=catching_up.catch_up_max, overlap=overlap, suspended=suspended,
        source=source, origin=origin, spec_hash=compute_spec_hash(fields), pod_run=pod_run,
    )
