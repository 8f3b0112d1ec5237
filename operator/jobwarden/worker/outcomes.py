"""What follows a recorded outcome: metrics, lifecycle hooks, the app-wide failure hook.

The recorder writes an attempt's outcome (fenced); this module reacts to what it
wrote: it counts the outcome (completed, retried, failed, cancelled, deferred and
skipped, or fenced), calls the job class's ``on_success`` / ``on_failure`` hooks
and the app-wide failure hook. Hooks are best-effort and never change a recorded
outcome, so they run on their own single thread, after the write, and a hook
that raises is logged and ignored.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jobwarden import errors
from jobwarden.coordination import onbusy
from jobwarden.jobs import definitions
from jobwarden.observability import metrics
from jobwarden.structs.policies import FailureReason
from jobwarden.structs.states import JobStatus
from jobwarden.worker import execution
from jobwarden.worker.context import Attempt, Cancelled, Failed, Outcome, Released, Succeeded

__all__ = ["FailureEvent", "Outcomes", "backoff"]

logger = logging.getLogger("jobwarden.worker")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailureEvent:
    """What the app-wide failure hook receives (no job data: it may be sensitive)."""

    job_id: int
    job_class: str
    queue: str
    attempt: int
    max_retries: int
    is_final: bool
    reason: FailureReason
    error: str


def backoff(attempt: Attempt) -> float:
    """Seconds until a failed attempt's retry: its job class's backoff (Job's if unknown)."""
    return (attempt.job_class or definitions.Job).backoff(attempt.claim.attempt)


class Outcomes:
    """Counts recorded outcomes and runs the hooks that follow them (one per worker)."""

    def __init__(self, *, failure_hook: str | None) -> None:
        self._failure_hook = self._load_failure_hook(failure_hook)
        self._hooks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobwarden-hooks")

    def close(self, *, wait: bool = False) -> None:
        """Stop the hook thread; ``wait``: after the hooks already queued have run
        (``jobwarden run-job`` exits right after its one attempt)."""
        self._hooks.shutdown(wait=wait)

    def recorded(self, attempt: Attempt, outcome: Outcome, status: JobStatus | None) -> None:
        """The recorder wrote ``outcome`` (``status`` None: the write was fenced)."""
        claim = attempt.claim
        labels = (claim.queue, claim.job_class)
        if status is None:
            operation = {Succeeded: "complete", Failed: "fail", Cancelled: "fail",
                         Released: "defer"}[type(outcome)]
            metrics.JOBS_FENCED.labels(*labels, operation).inc()
            logger.warning("fenced %s of job %d attempt %d: its claim was taken over",
                           operation, claim.id, claim.attempt)
            return
        if isinstance(outcome, Succeeded):
            metrics.JOBS_COMPLETED.labels(*labels).inc()
            self._hook(attempt, "on_success", outcome.result)
        elif isinstance(outcome, Failed):
            final = status is not JobStatus.PENDING
            onbusy.count_failure(*labels, outcome.reason, status)
            logger.warning("job %d (%s) attempt %d failed (%s)%s: %s", claim.id,
                           claim.job_class, claim.attempt, outcome.reason,
                           "" if not final else " for good",
                           outcome.error.splitlines()[-1] if outcome.error else "")
            self._hook(attempt, "on_failure", outcome.exception or outcome.error,
                       is_final=final)
            if self._failure_hook is not None:
                event = FailureEvent(job_id=claim.id, job_class=claim.job_class,
                                     queue=claim.queue, attempt=claim.attempt,
                                     max_retries=claim.max_retries, is_final=final,
                                     reason=outcome.reason, error=outcome.error)
                self._hooks.submit(self._call_failure_hook, event)
        elif isinstance(outcome, Cancelled):
            metrics.JOBS_CANCELLED.labels(*labels).inc()
        elif isinstance(outcome, Released) and outcome.deferral:
            onbusy.count_deferral(*labels, outcome.reason)

    def _hook(self, attempt: Attempt, name: str, *args: Any, **kwargs: Any) -> None:
        claim, job_class = attempt.claim, attempt.job_class
        if job_class is None or not definitions.overrides(job_class, name):
            return

        def call() -> None:
            instance = job_class()
            instance.job_id = claim.id
            instance.attempt = claim.attempt
            error = execution.call_hook(getattr(instance, name), *args, **kwargs)
            if error is not None:
                logger.warning("%s hook of job %d raised (ignored): %r", name, claim.id, error)

        self._hooks.submit(call)

    def _call_failure_hook(self, event: FailureEvent) -> None:
        assert self._failure_hook is not None
        error = execution.call_hook(self._failure_hook, event)
        if error is not None:
            logger.warning("failure hook raised (ignored): %r", error)

    @staticmethod
    def _load_failure_hook(path: str | None) -> Callable[[FailureEvent], object] | None:
        if not path:
            return None
        module_name, _, attr = path.partition(":")
        try:
            hook = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise errors.ConfigurationError(f"cannot load failure hook {path!r}: {exc}") from exc
        if not callable(hook):
            raise errors.ConfigurationError(f"failure hook {path!r} is not callable")
        return hook  # type: ignore[no-any-return]
