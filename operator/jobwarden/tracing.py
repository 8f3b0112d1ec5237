"""OpenTelemetry: a span per enqueue and per attempt, the attempt a child of the enqueue.

Optional (``pip install jobwarden[otel]``). Without the ``opentelemetry`` API
installed every function here returns at once and nothing else changes: the
import is tried once, and no span, context or column value is built. With it,
the enqueue span's context is stored in the job row (``trace_context``, W3C
``traceparent``/``tracestate`` as JSON) and the worker's :class:`TracingExtension`
starts each attempt's span as its child, with the job's id, class, queue,
attempt and outcome as attributes. Spans go to whatever tracer provider the
application configured (none: OpenTelemetry's no-op).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobwarden.structs.jobs import EnqueueResult, JobSpec
from jobwarden.worker.context import Cancelled, Failed, Released, Succeeded
from jobwarden.worker.extensions import CallNext, Extension

if TYPE_CHECKING:
    from jobwarden.definitions import Job
    from jobwarden.worker.context import Attempt, AttemptContext, Outcome

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the extra is not installed: tracing is off, at no cost
    trace = None  # type: ignore[assignment]

TRACER_NAME = "jobwarden"


def enabled() -> bool:
    return trace is not None


class EnqueueSpan:
    """One enqueue call's span (a batch is one span); ended with the ids or the error."""

    def __init__(self, specs: Sequence[JobSpec]) -> None:
        assert trace is not None
        first = specs[0]
        attributes: dict[str, Any] = {
            "messaging.system": "jobwarden", "messaging.operation": "publish",
            "jobwarden.job.class": first.job_class, "jobwarden.job.queue": first.queue,
            "jobwarden.batch.size": len(specs),
        }
        self.span = trace.get_tracer(TRACER_NAME).start_span(
            f"jobwarden.enqueue {first.job_class}", kind=trace.SpanKind.PRODUCER,
            attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        stored = json.dumps(carrier, sort_keys=True) if carrier else None
        self.specs = [dataclasses.replace(s, trace_context=stored) for s in specs]

    def done(self, results: Sequence[EnqueueResult]) -> None:
        if len(results) == 1:
            self.span.set_attribute("jobwarden.job.id", results[0].id)
            self.span.set_attribute("jobwarden.job.duplicate", results[0].duplicate)
        self.span.end()

    def failed(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(trace.StatusCode.ERROR, str(exc))
        self.span.end()


def enqueue_span(specs: Sequence[JobSpec]) -> EnqueueSpan | None:
    """A started span for this enqueue, or None (tracing off, or nothing to enqueue)."""
    if trace is None or not specs:
        return None
    return EnqueueSpan(specs)


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
        assert trace is not None, "TracingExtension needs opentelemetry-api"
        self._tracer = trace.get_tracer(TRACER_NAME)

    def around_attempt(self, attempt: Attempt, job_class: type[Job], context: AttemptContext,
                       call_next: CallNext) -> Outcome:
        claim = attempt.claim
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
