"""Jobwarden: Kubernetes-native background jobs for Python on PostgreSQL.

The public API is what this module exports; everything else is importable but
not promised to stay where it is.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobwarden.api.asyncclient import AsyncClient
    from jobwarden.api.client import Client
    from jobwarden.coordination.leases import (
        Lease,
        LeaseBusy,
        LeaseEvent,
        LeaseLost,
        LeaseNotReleased,
        literal,
    )
    from jobwarden.errors import (
        BadJobData,
        ConfigurationError,
        DatabaseUnavailable,
        InvalidInput,
        InvalidJobData,
        InvalidPayload,
        JobCancelled,
        JobFailed,
        JobFenced,
        JobNotFound,
        JobTimeout,
        JobwardenError,
        SchemaMissing,
        SchemaTooNew,
        UnknownJob,
        UnsupportedConnection,
        WaitTimeout,
    )
    from jobwarden.jobs.definitions import Job, job
    from jobwarden.schedules.errors import ScheduleError
    from jobwarden.schedules.registry import schedule
    from jobwarden.structs.states import JobStatus

#: Where each public name lives. Imported on first access (PEP 562), not with the
#: package: ``import jobwarden.worker...`` (or any submodule) runs this file first,
#: and a worker process should not load the client, the asyncio client and the
#: schedule store just because its job module says ``@jobwarden.job`` (``import
#: jobwarden`` then costs what ``jobwarden.jobs.definitions`` costs; docs/benchmarks.md,
#: "Idle worker RSS").
_WHERE = {
    "AsyncClient": "jobwarden.api.asyncclient", "Client": "jobwarden.api.client",
    "Job": "jobwarden.jobs.definitions", "job": "jobwarden.jobs.definitions",
    **dict.fromkeys((
        "BadJobData", "ConfigurationError", "DatabaseUnavailable", "InvalidInput",
        "InvalidJobData", "InvalidPayload", "JobCancelled", "JobFailed", "JobFenced",
        "JobNotFound", "JobTimeout", "JobwardenError", "SchemaMissing", "SchemaTooNew",
        "UnknownJob",
        "UnsupportedConnection", "WaitTimeout"), "jobwarden.errors"),
    **dict.fromkeys(("Lease", "LeaseBusy", "LeaseEvent", "LeaseLost", "LeaseNotReleased",
                     "literal"), "jobwarden.coordination.leases"),
    "ScheduleError": "jobwarden.schedules.errors", "schedule": "jobwarden.schedules.registry",
    "JobStatus": "jobwarden.structs.states",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobwarden' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "AsyncClient",
    "BadJobData",
    "Client",
    "ConfigurationError",
    "DatabaseUnavailable",
    "InvalidInput",
    "InvalidJobData",
    "InvalidPayload",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobFenced",
    "JobNotFound",
    "JobStatus",
    "JobTimeout",
    "JobwardenError",
    "Lease",
    "LeaseBusy",
    "LeaseEvent",
    "LeaseLost",
    "LeaseNotReleased",
    "ScheduleError",
    "SchemaMissing",
    "SchemaTooNew",
    "UnknownJob",
    "UnsupportedConnection",
    "WaitTimeout",
    "job",
    "literal",
    "schedule",
]
