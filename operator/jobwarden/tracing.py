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
from typing import Any

from jobwarden.structs.jobs import EnqueueResult, JobSpec

try:
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
        # No context to store (no tracer provider configured: a non-recording span)
        # leaves the rows as they are; a copy per row cost a third of a batch enqueue.
        self.specs = specs if stored is None else \
            [dataclasses.replace(s, trace_context=stored) for s in specs]

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
