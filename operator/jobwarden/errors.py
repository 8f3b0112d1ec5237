"""Exceptions that callers of Jobwarden may catch.

Every error a user can cause (bad DSN, bad JSON, unknown job, missing schema)
has its own class here, so the command line can map each to a documented exit
code and a clear message, and library users can catch exactly what they mean.
"""

from __future__ import annotations


class JobwardenError(Exception):
    """Base class of every error Jobwarden raises on purpose."""


class ConfigurationError(JobwardenError):
    """A setting is missing or invalid (no DSN, a malformed option)."""


class DatabaseUnavailable(JobwardenError):
    """The database cannot be reached (bad DSN, server down, connection lost)."""


class SchemaMissing(JobwardenError):
    """The Jobwarden tables are not there: run ``jobwarden migrate``."""


class SchemaTooNew(JobwardenError):
    """The schema no longer serves this release: a later release's migration removed
    something this code uses (docs/upgrades.md). Run a newer release."""


class UnknownJob(JobwardenError):
    """A job class path does not resolve to an importable job."""


class InvalidInput(JobwardenError, ValueError):
    """A value the caller passed cannot be stored (a NUL, a blank name, out of range).

    A ValueError too, so code that caught ValueError for bad input still does.
    """


class InvalidPayload(InvalidInput):
    """Job data (or a result) that cannot be stored as JSON."""


class JobNotFound(JobwardenError):
    """No job with that id."""


class JobFenced(JobwardenError):
    """This attempt no longer owns its claim (it was reaped and possibly re-run).

    Raised by ``Job.heartbeat()``: the cheap "do I still own this job?" check
    between units of work. Nothing the attempt writes through Jobwarden is
    recorded after this point.
    """


class JobCancelled(JobwardenError):
    """The job was asked to stop (``cancel``, or a ``Replace`` schedule overlap)."""


class JobTimeout(JobwardenError):
    """The attempt ran past its hard timeout."""


class BadJobData(JobwardenError):
    """The stored data does not fit the job (e.g. a function called with a non-object).

    Retrying cannot fix the data, so the attempt fails without retries.
    """


class UnsupportedConnection(JobwardenError, TypeError):
    """``conn=`` is not a connection Jobwarden can join (see docs/jobs.md, transactions)."""


class InvalidJobData(InvalidPayload):
    """Job data that does not fit the job's declared data type or function signature.

    Raised at enqueue, before anything is stored.
    """


class JobFailed(JobwardenError):
    """``wait`` on a job that finished without a result: failed, cancelled or interrupted.

    ``status`` is the job's final status, ``error`` its last recorded error.
    """

    def __init__(self, *, job_id: int, status: str, error: str | None) -> None:
        last = (error or "").strip().splitlines()
        super().__init__(f"job {job_id} {status}" + (f": {last[-1]}" if last else ""))
        self.job_id = job_id
        self.status = status
        self.error = error


class WaitTimeout(JobwardenError, TimeoutError):
    """``wait`` gave up: the job had not finished within the timeout (it may still)."""

    def __init__(self, message: str, *, job_id: int) -> None:
        super().__init__(message)
        self.job_id = job_id
