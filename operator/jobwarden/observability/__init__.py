"""What a process tells the outside: metrics, trace spans, log fields and HTTP probes.

``metrics`` names every Prometheus metric (kept by ``meters`` without importing
prometheus_client); ``tracing`` the OpenTelemetry enqueue spans; ``logfields``
the fields of a job's log lines; ``health`` the /metrics, /healthz and /readyz
endpoints the worker and the operator serve. No database, no worker: everything
else may import these.
"""
