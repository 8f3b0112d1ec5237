"""Jobwarden: Kubernetes-native background jobs for Python on PostgreSQL.

The public API is what this module exports; everything else is importable but
not promised to stay where it is.
"""

from jobwarden.asyncclient import AsyncClient
from jobwarden.client import Client
from jobwarden.definitions import Job, job
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
    UnknownJob,
    UnsupportedConnection,
    WaitTimeout,
)
from jobwarden.leases import Lease, LeaseBusy, LeaseEvent, LeaseLost, LeaseNotReleased, literal
from jobwarden.schedules.errors import ScheduleError
from jobwarden.schedules.registry import schedule
from jobwarden.structs.states import JobStatus

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
    "UnknownJob",
    "UnsupportedConnection",
    "WaitTimeout",
    "job",
    "literal",
    "schedule",
]
