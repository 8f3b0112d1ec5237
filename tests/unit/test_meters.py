"""observability.meters behaves as prometheus_client, sample for sample, without importing it.

The metrics keep their values in plain dicts so that a worker which serves no
/metrics never loads prometheus_client (its exposition half is most of its
memory); these tests hold the two to the same samples, and check that the
worker's import graph stays free of what only serving needs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram

from jobwarden.observability import meters

BUCKETS = (0.1, 1, 5)


def samples(registry: Any) -> list[tuple[str, dict[str, str], float]]:
    """Every sample, prometheus_client's collected as after ``disable_created_metrics()``
    (what every Jobwarden process exports: no ``_created`` series)."""
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        return sorted(((s.name, s.labels, s.value) for m in registry.collect()
                       for s in m.samples), key=repr)
    finally:
        prometheus_client.enable_created_metrics()  # type: ignore[no-untyped-call]


def both(make: Callable[[Any, Any], Any]) -> tuple[Any, Any, Any, Any]:
    ours_registry, theirs_registry = meters.Registry(), CollectorRegistry()
    return make(meters, ours_registry), make(None, theirs_registry), ours_registry, \
        theirs_registry


def test_counters_gauges_and_histograms_export_what_prometheus_client_exports() -> None:
    def make(kind: Any, registry: Any) -> Any:
        counter = (kind.Counter if kind else PromCounter)(
            "x_events", "Events.", ("queue", "job_class"), registry=registry)
        gauge = (kind.Gauge if kind else PromGauge)("x_level", "Level.", registry=registry)
        labelled = (kind.Gauge if kind else PromGauge)(
            "x_running", "Running.", ("queue",), registry=registry)
        histogram = (kind.Histogram if kind else PromHistogram)(
            "x_seconds", "Seconds.", ("queue",), buckets=BUCKETS, registry=registry)
        return counter, gauge, labelled, histogram

    ours, theirs, ours_registry, theirs_registry = both(make)
    for counter, gauge, labelled, histogram in (ours, theirs):
        counter.labels("q", "A").inc()
        counter.labels(queue="q", job_class="A").inc(2.5)
        counter.labels("q", 7)  # born at 0, the value as a string
        gauge.set(3)
        gauge.inc(2)
        gauge.dec()
        labelled.labels("q").set(4)
        labelled.labels("r").inc()
        labelled.remove("r")
        for value in (0.05, 0.1, 0.7, 3, 99):
            histogram.labels("q").observe(value)
    assert samples(ours_registry) == samples(theirs_registry)
    ours_text = generate_latest(ours_registry).decode()  # type: ignore[arg-type]
    assert "# TYPE x_events_total counter" in ours_text or "# TYPE x_events counter" in ours_text
    assert 'x_seconds_bucket{le="+Inf",queue="q"} 5.0' in ours_text
    assert ours_registry.get_sample_value("x_events_total", {"queue": "q", "job_class": "A"}) \
        == 3.5
    assert ours_registry.get_sample_value("x_level") == 4.0
    assert ours_registry.get_sample_value("x_running", {"queue": "r"}) is None
    assert "_created" not in ours_text


def test_no_process_exports_created_series() -> None:
    """A ``_created`` series per counter and histogram label set was 50 of the 119 samples
    of a scrape (issue 27); nothing reads them. The whole registry every worker, operator
    and console process serves, with every label set primed, exports none."""
    from jobwarden.observability import metrics
    metrics.prime_operator()
    metrics.prime_job("q", "app:Job")
    metrics.prime_pod_runs("JobSchedule", "ns/name")
    metrics.JOB_DURATION.labels("q", "app:Job").observe(1.0)
    text = generate_latest(metrics.REGISTRY).decode()  # type: ignore[arg-type]
    assert "jobwarden_jobs_failed_total{" in text
    assert "jobwarden_job_duration_seconds_count{" in text
    assert [line for line in text.splitlines() if "_created" in line] == []


def test_the_same_misuse_is_refused() -> None:
    registry = meters.Registry()
    counter = meters.Counter("y_total_things", "Things.", ("kind",), registry=registry)
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("a").inc(-1)
    with pytest.raises(ValueError, match="label count"):
        counter.labels("a", "b")
    with pytest.raises(ValueError, match="label names"):
        counter.labels(other="a")
    with pytest.raises(ValueError, match="duplicated"):
        meters.Counter("y_total_things", "Again.", registry=registry)
    plain = meters.Gauge("y_plain", "Plain.", registry=registry)
    with pytest.raises(ValueError, match="No label names"):
        plain.labels("a")


def test_clear_drops_every_label_set_and_an_unlabelled_metric_restarts_at_zero() -> None:
    registry = meters.Registry()
    labelled = meters.Counter("z_labelled", "L.", ("kind",), registry=registry)
    plain = meters.Gauge("z_plain", "P.", registry=registry)
    labelled.labels("a").inc()
    plain.set(5)
    labelled.clear()
    plain.clear()
    assert registry.get_sample_value("z_labelled_total", {"kind": "a"}) is None
    assert registry.get_sample_value("z_plain") == 0.0


def test_a_worker_without_http_port_imports_nothing_only_serving_or_tracing_needs() -> None:
    """What an idle worker process loads: not prometheus_client (nor http.server), not
    the OpenTelemetry API -- until something collects the metrics."""
    code = textwrap.dedent("""
        import sys
        import jobwarden
        from jobwarden import assembly, settings
        from jobwarden.observability import metrics
        from jobwarden.worker import worker

        @jobwarden.job
        def noop() -> None: ...

        metrics.JOBS_COMPLETED.labels("default", "x").inc()
        metrics.WORKER_SLOTS.set(4)
        loaded = [m for m in ("prometheus_client", "http.server", "opentelemetry.trace",
                              "jobwarden.api.client", "jobwarden.api.asyncclient")
                  if m in sys.modules]
        assert not loaded, loaded
        assert metrics.REGISTRY.get_sample_value(
            "jobwarden_jobs_completed_total", {"queue": "default", "job_class": "x"}) == 1.0
        assert "prometheus_client" in sys.modules
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
