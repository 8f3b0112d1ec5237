"""Typed parsing of ``JobSchedule`` and ``ExclusiveJob`` specs: pure, with clear errors.

Why a parser of its own when the API server already validated the object: the
OpenAPI schema and CEL rules cannot check cron syntax, time-zone names or
catch-up rules, an older CRD (or a cluster without validation, such as the test
emulator) may let anything through, and the operator must never turn a bad
manifest into a database row. So every field is read through one
:class:`_Reader` that knows its dotted path (``spec.job.timeoutSeconds``): an
error names the field, and the set of paths the code reads is declared in
:data:`SCHEDULE_FIELDS` / :data:`EXCLUSIVE_FIELDS` so a test can prove the CRDs
and this module agree.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from jobwarden import schedules
from jobwarden.schedules import validation, walltime
from jobwarden.structs.leases import lease_name
from jobwarden.structs.policies import CATCH_UPS, ON_BUSY, OVERLAPS, CatchUp, OnBusy, Overlap
from jobwarden.structs.schedules import ScheduleDefinition

#: A word of a policy (``Overlap``, ``CatchUp``, ``OnBusy``), as :meth:`_Reader.choice` reads it.
Word = TypeVar("Word", bound=str)

#: Where every schedule row that came from Kubernetes says it came from.
SOURCE_PREFIX = "kubernetes:"

_CLASS_PATH = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)
_QUEUE = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")

#: Fields of ``spec.job`` (both kinds), relative to the spec.
JOB_FIELDS = ("job", "job.class", "job.data", "job.queue", "job.priority",
              "job.timeoutSeconds", "job.maxRetries")
#: Fields of a run in a pod of its own (both kinds), relative to the spec.
POD_RUN_FIELDS = ("podTemplate", "dsnSecretRef", "dsnSecretRef.name", "dsnSecretRef.key",
                  "startDeadlineSeconds")
#: Every path under ``spec`` the JobSchedule parser reads.
SCHEDULE_FIELDS = ("schedule", "interval", "timeZone", *JOB_FIELDS, "catchUp",
                   "catchUpWindowSeconds", "catchUpMax", "concurrencyPolicy", "suspend",
                   "workerPool", "successfulJobsHistoryLimit", "failedJobsHistoryLimit",
                   *POD_RUN_FIELDS)
#: Every path under ``spec`` the ExclusiveJob parser reads.
EXCLUSIVE_FIELDS = (*JOB_FIELDS, "concurrencyKey", "lease", "lease.ttlSeconds", "lease.onBusy",
                    "workerPool", "successfulJobsHistoryLimit", "failedJobsHistoryLimit",
                    "ttlSecondsAfterFinished", *POD_RUN_FIELDS)
#: An ExclusiveJob's pod history when unset: CronJob's defaults (its Succeeded / Failed pods).
EXCLUSIVE_SUCCESSFUL_HISTORY = 3
EXCLUSIVE_FAILED_HISTORY = 1
#: ``spec.startDeadlineSeconds`` when unset: claim -> running container.
DEFAULT_START_DEADLINE = 300
#: The container of a pod template that runs the job (else the first one).
JOB_CONTAINER = "job"
#: Environment of the job container the operator sets per run: a template cannot.
POD_RUN_OWNED_ENV = frozenset({"JOBWARDEN_JOB_ID", "JOBWARDEN_CLAIM_TOKEN",
                               "JOBWARDEN_LEASE_TOKEN", "JOBWARDEN_DSN_FILE", "JOBWARDEN_DSN",
                               "JOBWARDEN_HOST", "POD_NAME", "POD_NAMESPACE"})


class SpecError(ValueError):
    """A spec the operator refuses; ``field`` is the dotted path at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"spec.{field}: {message}")
        self.field = field
        self.reason = "InvalidSpec"


class _Missing:
    pass


_MISSING = _Missing()


class _Reader:
    """Reads dotted paths of one spec mapping, type-checked, naming the field on error."""

    def __init__(self, spec: Mapping[str, Any] | None, fields: tuple[str, ...]) -> None:
        if spec is not None and not isinstance(spec, Mapping):
            raise SpecError("", "must be an object")
        self._spec: Mapping[str, Any] = spec or {}
        self._fields = fields

    def raw(self, path: str) -> Any:
        assert path in self._fields, f"{path} is not declared in the field list"
        node: Any = self._spec
        walked: list[str] = []
        for part in path.split("."):
            if node is None:
                return _MISSING
            if not isinstance(node, Mapping):
                raise SpecError(".".join(walked), "must be an object")
            walked.append(part)
            node = node.get(part, _MISSING)
            if node is _MISSING:
                return _MISSING
        return node

    def string(self, path: str, *, default: str | None = None,
               required: bool = False) -> str | None:
        value = self.raw(path)
        if value is _MISSING or value is None:
            if required:
                raise SpecError(path, "is required")
            return default
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string, not {type(value).__name__}")
        if not value.strip():
            if required:
                raise SpecError(path, "must not be empty")
            return default
        return value

    def integer(self, path: str, *, default: int | None = None, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self.raw(path)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and (not math.isfinite(value)
                                              or not value.is_integer())):
            raise SpecError(path, f"must be an integer, not {value!r}")
        number = int(value)
        if minimum is not None and number < minimum:
            raise SpecError(path, f"must be at least {minimum}, not {number}")
        if maximum is not None and number > maximum:
            raise SpecError(path, f"must be at most {maximum}, not {number}")
        return number

    def boolean(self, path: str, *, default: bool) -> bool:
        value = self.raw(path)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(path, f"must be true or false, not {value!r}")
        return value

    def choice(self, path: str, allowed: tuple[Word, ...], *, default: Word) -> Word:
        """One of ``allowed`` (a policy's words), typed as that policy."""
        value = self.string(path, default=default)
        for word in allowed:
            if value == word:
                return word
        raise SpecError(path, f"must be one of {', '.join(allowed)}, not {value!r}")

    def mapping(self, path: str) -> dict[str, Any]:
        value = self.raw(path)
        if value is _MISSING or value is None:
            return {}
        if not isinstance(value, Mapping):
            raise SpecError(path, f"must be an object, not {type(value).__name__}")
        return dict(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobTemplate:
    """``spec.job``: what to enqueue. ``None`` means "the job class's own value"."""

    job_class: str
    data: dict[str, Any]
    queue: str | None
    priority: int | None
    timeout_seconds: int | None
    max_retries: int | None


def _job(reader: _Reader) -> JobTemplate:
    reader.mapping("job")
    job_class = reader.string("job.class", required=True)
    assert job_class is not None
    if not _CLASS_PATH.match(job_class):
        raise SpecError("job.class", f"{job_class!r} must look like 'package.module:Name'")
    data = reader.mapping("job.data")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecError("job.data", f"must be plain JSON: {exc}") from exc
    queue = reader.string("job.queue")
    if queue is not None and (len(queue) > 63 or not _QUEUE.match(queue)):
        raise SpecError("job.queue", f"{queue!r} is not a valid queue name (lowercase letters, "
                                     "digits, '-', '_', '.'; at most 63)")
    return JobTemplate(
        job_class=job_class, data=data, queue=queue,
        priority=reader.integer("job.priority", minimum=-32768, maximum=32767),
        timeout_seconds=reader.integer("job.timeoutSeconds", minimum=1, maximum=604800),
        max_retries=reader.integer("job.maxRetries", minimum=0, maximum=1000),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRunSpec:
    """``spec.podTemplate`` and what a run in a pod of its own needs besides it.

    The template is kept as the user wrote it (the API server validated it
    against Kubernetes' own PodTemplateSpec schema); the operator adds its part
    per run (jobwarden.controller.podruns.pods).
    """

    template: dict[str, Any]
    dsn_secret: str
    dsn_key: str
    start_deadline_seconds: int


def _pod_run(reader: _Reader) -> PodRunSpec | None:
    raw = reader.raw("podTemplate")
    if raw is _MISSING or raw is None:
        return None
    template = reader.mapping("podTemplate")
    pod = template.get("spec")
    if not isinstance(pod, Mapping):
        raise SpecError("podTemplate.spec", "is required (at least one container with an image)")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers or not all(
            isinstance(c, Mapping) for c in containers):
        raise SpecError("podTemplate.spec.containers",
                        "must list at least one container (the one named 'job', else the "
                        "first, runs the job)")
    job = next((c for c in containers if c.get("name") == JOB_CONTAINER), containers[0])
    if not isinstance(job.get("image"), str) or not job["image"].strip():
        raise SpecError("podTemplate.spec.containers",
                        f"the job container {job.get('name')!r} needs an image")
    for entry in job.get("env") or []:
        if isinstance(entry, Mapping) and entry.get("name") in POD_RUN_OWNED_ENV:
            raise SpecError("podTemplate.spec.containers",
                            f"env {entry.get('name')} is set by the operator")
    policy = pod.get("restartPolicy")
    if policy not in (None, "Never"):
        raise SpecError("podTemplate.spec.restartPolicy",
                        f"must be Never (or unset), not {policy!r}: a restarted container "
                        "would run the job again under the same claim")
    reader.mapping("dsnSecretRef")
    secret = reader.string("dsnSecretRef.name")
    if secret is None:
        raise SpecError("dsnSecretRef.name", "is required with spec.podTemplate (the Secret "
                                             "holding the database DSN the pod connects with)")
    deadline = reader.integer("startDeadlineSeconds", default=DEFAULT_START_DEADLINE,
                              minimum=10, maximum=86400)
    assert deadline is not None
    return PodRunSpec(template=template, dsn_secret=secret,
                      dsn_key=reader.string("dsnSecretRef.key", default="dsn") or "dsn",
                      start_deadline_seconds=deadline)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobScheduleSpec:
    """A valid ``JobSchedule`` resource spec, in the schedule store's vocabulary.

    :func:`parse_job_schedule` validates its :meth:`store_arguments` into a
    :class:`~jobwarden.structs.schedules.ScheduleDefinition` once per reconciliation
    and keeps that as ``validated``. The CRD's words map to the store's here
    (``concurrencyPolicy`` is ``overlap``, ``catchUpMax`` is ``catch_up_max``: the
    table in :mod:`jobwarden.structs.schedules`).
    """

    cron: str | None
    interval: str | None
    timezone: str
    job: JobTemplate
    catch_up: CatchUp
    catch_up_window_seconds: int
    catch_up_max: int
    overlap: Overlap
    suspended: bool
    worker_pool: str | None
    #: CronJob's history limits: finished jobs of this schedule kept (None: all, until
    #: the global purge). Not part of the row: retention does not change the schedule.
    successful_history: int | None = None
    failed_history: int | None = None
    #: Each run in a pod of its own (None: WorkerPool slots run it).
    pod_run: PodRunSpec | None = None
    #: The store's validated definition of this spec (``parse_job_schedule`` sets it):
    #: what the reconciler compares (its ``spec_hash``) and applies, validated once.
    validated: ScheduleDefinition | None = None

    def store_arguments(self) -> dict[str, Any]:
        """Keyword arguments of ``client.schedules.upsert`` (all but name and source)."""
        return {
            "cron": self.cron, "interval": self.interval, "timezone": self.timezone,
            "job_class": self.job.job_class, "data": self.job.data, "queue": self.job.queue,
            "priority": self.job.priority, "timeout_seconds": self.job.timeout_seconds,
            "max_retries": self.job.max_retries, "catch_up": self.catch_up,
            "catch_up_window_seconds": self.catch_up_window_seconds,
            "catch_up_max": self.catch_up_max, "overlap": self.overlap,
            "suspended": self.suspended,
        }

    def describe(self) -> str:
        when = f"every {self.interval}" if self.interval else f"{self.cron!r} ({self.timezone})"
        return f"{self.job.job_class} {when}"


#: The resource's field for each argument of ``validation.validate`` that can be at fault.
_SCHEDULE_FIELD = {
    "timezone": "timeZone", "catch_up": "catchUp",
    "catch_up_window_seconds": "catchUpWindowSeconds", "catch_up_max": "catchUpMax",
    "overlap": "concurrencyPolicy", "suspended": "suspend", "job_class": "job.class",
    "data": "job.data", "queue": "job.queue", "priority": "job.priority",
    "timeout_seconds": "job.timeoutSeconds", "max_retries": "job.maxRetries",
}


def parse_job_schedule(spec: Mapping[str, Any] | None, *, row_name: str = "jobschedule",
                       source: str = "kubernetes",
                       pod_run_ref: str | None = None) -> JobScheduleSpec:
    """Validate a JobSchedule spec completely; raise :class:`SpecError` on the first fault.

    The shape (types, required fields, choices, ranges) is read here; what makes
    a schedule valid (its expression, zone, catch-up, job) is decided once, by
    the store's own :func:`~jobwarden.schedules.validation.validate`, whose result
    (the normalised definition and its ``spec_hash``) is kept as ``validated`` for
    the reconciler to compare and apply without validating again. Its failure is
    reported against the resource's field. ``pod_run_ref`` is the resource's
    :func:`pod_run_name`, stored on the row when the spec has a pod template.
    """
    reader = _Reader(spec, SCHEDULE_FIELDS)
    cron = reader.string("schedule")
    interval = reader.string("interval")
    if (cron is None) == (interval is None):
        raise SpecError("schedule", "set exactly one of spec.schedule (a cron expression) "
                                    "or spec.interval (e.g. 30s, 5m, 2h)")
    timezone = reader.string("timeZone", default="UTC")
    assert timezone is not None
    if interval is not None:
        # An interval is epoch-aligned in UTC, so it is stored with UTC (the CRD
        # documents that timeZone is ignored for intervals); the zone is still
        # checked, because a typo is a typo (for a cron schedule validate() does it).
        try:
            walltime.load_zone(timezone)
        except schedules.ScheduleError as exc:
            raise SpecError("timeZone", str(exc)) from exc
    catch_up: CatchUp = reader.choice("catchUp", CATCH_UPS, default="latest")
    window = reader.integer("catchUpWindowSeconds", default=3600, minimum=60, maximum=2678400)
    most = reader.integer("catchUpMax", default=10, minimum=1, maximum=1000)
    assert window is not None and most is not None
    overlap: Overlap = reader.choice("concurrencyPolicy", OVERLAPS, default="Allow")
    parsed = JobScheduleSpec(
        cron=cron, interval=interval, timezone="UTC" if interval is not None else timezone,
        job=_job(reader), catch_up=catch_up,
        catch_up_window_seconds=window, catch_up_max=most,
        overlap=overlap,
        suspended=reader.boolean("suspend", default=False),
        worker_pool=reader.string("workerPool"),
        successful_history=reader.integer("successfulJobsHistoryLimit", minimum=0,
                                          maximum=10000),
        failed_history=reader.integer("failedJobsHistoryLimit", minimum=0, maximum=10000),
        pod_run=_pod_run(reader),
    )
    try:
        validated = validation.validate(
            row_name, **parsed.store_arguments(), source=source,
            pod_run=pod_run_ref if parsed.pod_run is not None else None)
    except schedules.ScheduleError as exc:
        field = ("interval" if interval is not None else "schedule") \
            if exc.field == "expression" else _SCHEDULE_FIELD.get(exc.field or "", "*")
        raise SpecError(field, exc.detail) from exc
    return dataclasses.replace(parsed, validated=validated)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExclusiveJobSpec:
    """A valid ``ExclusiveJob`` spec."""

    job: JobTemplate
    concurrency_key: str | None
    lease_ttl_seconds: int | None
    on_busy: OnBusy
    worker_pool: str | None
    #: The job runs in a pod of its own (None: a WorkerPool slot runs it).
    pod_run: PodRunSpec | None = None
    #: Finished pods kept (Succeeded / Failed; the job has one row, its pods one per
    #: attempt): CronJob's defaults, since an ExclusiveJob's retries would otherwise
    #: leave every failed attempt's pod behind until the resource is deleted.
    successful_history: int = EXCLUSIVE_SUCCESSFUL_HISTORY
    failed_history: int = EXCLUSIVE_FAILED_HISTORY
    #: Delete the resource this long after its job finished (Job's TTL); None: keep it.
    ttl_after_finished: int | None = None

    @property
    def lease_name(self) -> str:
        """The lease the worker takes: ``key:<concurrencyKey>``, else ``job:<class>``.

        The same names a job class's ``concurrency_key`` / ``exclusive`` produce
        (jobwarden.extensions.exclusive), so a resource and application code that use the
        same key exclude each other.
        """
        if self.concurrency_key is not None:
            return lease_name(f"key:{self.concurrency_key}")
        return lease_name(f"job:{self.job.job_class}")


def parse_exclusive_job(spec: Mapping[str, Any] | None) -> ExclusiveJobSpec:
    """Validate an ExclusiveJob spec completely; raise :class:`SpecError` on the first fault."""
    reader = _Reader(spec, EXCLUSIVE_FIELDS)
    job = _job(reader)
    key = reader.string("concurrencyKey")
    if key is not None and len(key) > 200:
        raise SpecError("concurrencyKey", "must be at most 200 characters")
    reader.mapping("lease")
    return ExclusiveJobSpec(
        job=job, concurrency_key=key,
        lease_ttl_seconds=reader.integer("lease.ttlSeconds", minimum=5, maximum=86400),
        on_busy=reader.choice("lease.onBusy", ON_BUSY, default="defer"),
        worker_pool=reader.string("workerPool"),
        pod_run=_pod_run(reader),
        successful_history=_or(reader.integer("successfulJobsHistoryLimit", minimum=0,
                                              maximum=10000), EXCLUSIVE_SUCCESSFUL_HISTORY),
        failed_history=_or(reader.integer("failedJobsHistoryLimit", minimum=0, maximum=10000),
                           EXCLUSIVE_FAILED_HISTORY),
        ttl_after_finished=reader.integer("ttlSecondsAfterFinished", minimum=0,
                                          maximum=2**31 - 1),
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def pod_run_name(kind: str, namespace: str, name: str) -> str:
    """What a job row's ``pod_run`` holds: ``<Kind>/<namespace>/<name>``.

    No cluster part, like the schedule row's name: the same resource applied in
    several clusters is one pod-run resource, and whichever cluster's operator
    claims a run creates its pod.
    """
    return f"{kind}/{namespace}/{name}"


def schedule_row_name(namespace: str, name: str) -> str:
    """The schedule's name in the database: ``<namespace>/<name>``.

    Namespaced so two teams' ``nightly`` schedules stay apart, and without a
    cluster part so the same resource applied in several clusters is ONE
    schedule (its slots are enqueued once, whichever cluster's runner gets there).
    """
    return f"{namespace}/{name}"


def exclusive_unique_key(uid: str, generation: int) -> str:
    """One job per resource uid and generation: re-delivery and restarts enqueue nothing new."""
    return f"exclusivejob:{uid}:{generation}"


def source_of(cluster: str) -> str:
    return f"{SOURCE_PREFIX}{cluster}"
