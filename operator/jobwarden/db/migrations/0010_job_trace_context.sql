-- The enqueuer's trace context (W3C traceparent/tracestate as a JSON object),
-- written when OpenTelemetry is installed in the enqueuing process, so a
-- worker's attempt span becomes a child of the enqueue span (docs/tracing.md).
-- NULL otherwise; adding a nullable column rewrites nothing.
ALTER TABLE {schema}.jobs ADD COLUMN trace_context text;
