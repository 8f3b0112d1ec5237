"""The worker side of tracing: a span around each attempt (a worker extension).

Apart from :mod:`jobwarden.observability.tracing` (the enqueue spans the client makes), so the
client, and through it the operator, imports nothing of the worker.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from jobwarden.observability import tracing
from jobwarden.worker.context import Cancelled, Failed, Released, Succeeded
from jobwarden.worker.extensions import CallNext, Extension

if TYPE_CHECKING:
    from jobwarden.jobs.definitions import Job
    from jobwarden.worker.context import Attempt, AttemptContext, Outcome

__all__ = ["TracingExtension"]


def _outcome_name(outcome: Outcome) -> str:
    if isinstance(outcome, Succeeded):
        return "succeeded"
    if isinstance(outcome, Failed):
        return f"failed:{outcome.reason}"
    if isinstance(outcome, Cancelled):
        return "cancelled"
    assert isinstance(outcome, Released)
    return f"released:{outcome.reason}"


class TracingExtension(Extension):
    """Wraps each attempt in a CONSUMER span, a child of the job's enqueue span."""

    def __init__(self, worker: object = None) -> None:
        assert tracing.enabled(), "TracingExtension needs opentelemetry-api"
        self._tracer: Any = None

    def around_attempt(self, attempt: Attempt, job_class: type[Job], context: AttemptContext,
                       call_next: CallNext) -> Outcome:
        # The API is imported by the first attempt, not by the worker's start (an idle
        # worker does not carry it); the tracer is OpenTelemetry's own cached proxy.
        trace, propagate, otel_context = tracing.api()
        claim = attempt.claim
        if claim.trace_context is None and not tracing.provider_configured():
            # No SDK set up (the API only, as a dependency of something else): the span
            # would be the invalid no-op one, and with no parent to carry into the
            # job's code, attaching it changes nothing the code can see. Skipped: a
            # span per attempt that nothing records (docs/benchmarks.md, "Worker cost
            # per job").
            return call_next(context)
        if self._tracer is None:
            self._tracer = trace.get_tracer(tracing.TRACER_NAME)
        parent = None
        if claim.trace_context:
            try:
                parent = propagate.extract(json.loads(claim.trace_context))
            except (ValueError, TypeError):
                parent = None  # a malformed context never stops a job
        span = self._tracer.start_span(
            f"jobwarden.attempt {claim.job_class}", context=parent,
            kind=trace.SpanKind.CONSUMER, attributes={
                "messaging.system": "jobwarden", "messaging.operation": "process",
                "jobwarden.job.id": claim.id, "jobwarden.job.class": claim.job_class,
                "jobwarden.job.queue": claim.queue, "jobwarden.job.attempt": claim.attempt,
            })
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            outcome = call_next(context)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, str(exc))
            raise
        finally:
            otel_context.detach(token)
        span.set_attribute("jobwarden.job.outcome", _outcome_name(outcome))
        if isinstance(outcome, Failed):
            span.set_status(trace.StatusCode.ERROR, outcome.error.splitlines()[-1]
                            if outcome.error else outcome.reason)
        span.end()
        return outcome
