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
import functools
import importlib.util
import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from jobwarden.structs.jobs import EnqueueResult, JobBatch, JobSpec

TRACER_NAME = "jobwarden"

#: Whether the OpenTelemetry API is installed, found without importing it: the API
#: and its context machinery are 0.5-1 MiB of a process's memory, loaded by the first
#: span (:func:`api`), so a worker that has run nothing yet has not paid for them.
def _installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ImportError:  # no "opentelemetry" package at all (or one blocked)
        return False


_INSTALLED = _installed()


def enabled() -> bool:
    return _INSTALLED


@functools.cache
def api() -> tuple[ModuleType, ModuleType, ModuleType]:
    """OpenTelemetry's ``trace``, ``propagate`` and ``context`` modules, imported on first
    use (only where :func:`enabled`)."""
    from opentelemetry import context, propagate, trace

    return trace, propagate, context


class EnqueueSpan:
    """One enqueue call's span (a batch is one span); ended with the ids or the error."""

    def __init__(self, *, job_class: str, queue: str, size: int) -> None:
        trace, propagate, _ = api()
        attributes: dict[str, Any] = {
            "messaging.system": "jobwarden", "messaging.operation": "publish",
            "jobwarden.job.class": job_class, "jobwarden.job.queue": queue,
            "jobwarden.batch.size": size,
        }
        self.span = trace.get_tracer(TRACER_NAME).start_span(
            f"jobwarden.enqueue {job_class}", kind=trace.SpanKind.PRODUCER,
            attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        #: What each row's ``trace_context`` stores; None when there is no context
        #: (no tracer provider configured: a non-recording span), rows left as they are.
        self.context = json.dumps(carrier, sort_keys=True) if carrier else None

    def stamped(self, specs: Sequence[JobSpec]) -> Sequence[JobSpec]:
        """``specs`` carrying this span's context (the same list when there is none:
        a copy per row cost a third of a batch enqueue)."""
        if self.context is None:
            return specs
        return [dataclasses.replace(s, trace_context=self.context) for s in specs]

    def stamped_batch(self, batch: JobBatch) -> JobBatch:
        """``batch`` carrying this span's context (one shared column, not one per row)."""
        if self.context is None:
            return batch
        return dataclasses.replace(
            batch, shared=dataclasses.replace(batch.shared, trace_context=self.context))

    def done(self, results: Sequence[EnqueueResult]) -> None:
        if len(results) == 1:
            self.span.set_attribute("jobwarden.job.id", results[0].id)
            self.span.set_attribute("jobwarden.job.duplicate", results[0].duplicate)
        self.span.end()

    def failed(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(api()[0].StatusCode.ERROR, str(exc))
        self.span.end()


def _nothing_to_trace() -> bool:
    """Whether an enqueue span would record nothing and carry nothing.

    So when no tracer provider is configured (OpenTelemetry's default proxy) and
    the current context is empty (no parent span, e.g. extracted from a request,
    that would be carried to the job; no baggage): the no-op span's context
    is then invalid, its propagation writes nothing, and the row's
    ``trace_context`` would stay NULL anyway. Building that span and propagating
    it was 15% of a single enqueue's client instructions (304k -> 255k per call).
    """
    _, _, context = api()
    if context.get_current():  # a span, baggage or anything else: trace as usual
        return False
    return not provider_configured()


def provider_configured() -> bool:
    """Whether an application set a tracer provider (an SDK): without one, spans are
    OpenTelemetry's invalid no-op ones and record nothing (the API only, installed as
    a dependency of something else)."""
    trace, _, _ = api()
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def enqueue_span(specs: Sequence[JobSpec]) -> EnqueueSpan | None:
    """A started span for this enqueue, or None (tracing off, nothing to trace, or
    nothing to enqueue)."""
    if not _INSTALLED or not specs or _nothing_to_trace():
        return None
    return EnqueueSpan(job_class=specs[0].job_class, queue=specs[0].queue, size=len(specs))


def batch_span(batch: JobBatch) -> EnqueueSpan | None:
    """As :func:`enqueue_span`, for the rows of one ``enqueue_many`` call."""
    if not _INSTALLED or not len(batch) or _nothing_to_trace():
        return None
    return EnqueueSpan(job_class=batch.shared.job_class, queue=batch.shared.queue,
                       size=len(batch))
