"""OpenTelemetry: an enqueue span, and each attempt's span as its child (in-memory exporter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobwarden
from jobwarden.observability import tracing
from jobwarden.worker.worker import Worker
from tests.support import testjobs
from tests.support.waiting import wait_for

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def stored_context(dsn: str, job_id: int) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT trace_context FROM jobwarden.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_the_attempt_span_is_a_child_of_the_enqueue_span(
        client: jobwarden.Client, spans: InMemorySpanExporter, dsn: str,
        start_worker: Callable[..., Worker]) -> None:
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        ok = client.enqueue(testjobs.add, {"a": 1, "b": 1})
    bad = client.enqueue(testjobs.Hooked, {"fail": True})
    (enqueue_ok, enqueue_bad) = named(spans, "jobwarden.enqueue")
    assert enqueue_ok.parent is not None
    assert enqueue_ok.parent.span_id == request.get_span_context().span_id
    assert enqueue_ok.attributes is not None and enqueue_ok.attributes["jobwarden.job.id"] == ok.id
    stored = json.loads(stored_context(dsn, ok.id) or "{}")
    assert f"{enqueue_ok.context.trace_id:032x}" in stored["traceparent"]

    start_worker(apps=["tests.support.testjobs"])
    assert client.wait(ok.id, timeout=30) == 2
    with pytest.raises(jobwarden.JobFailed):
        client.wait(bad.id, timeout=30)
    wait_for(lambda: len(named(spans, "jobwarden.attempt")) == 2, message="attempt spans")
    attempts = {s.attributes["jobwarden.job.id"]: s for s in named(spans, "jobwarden.attempt")
                if s.attributes is not None}
    for enqueued, parent in ((ok, enqueue_ok), (bad, enqueue_bad)):
        span = attempts[enqueued.id]
        assert span.parent is not None and span.parent.span_id == parent.context.span_id
        assert span.context.trace_id == parent.context.trace_id
        assert span.kind is trace.SpanKind.CONSUMER
    assert dict(attempts[ok.id].attributes or {}) == {
        "messaging.system": "jobwarden", "messaging.operation": "process",
        "jobwarden.job.id": ok.id, "jobwarden.job.class": testjobs.add.path(),
        "jobwarden.job.queue": "default", "jobwarden.job.attempt": 1,
        "jobwarden.job.outcome": "succeeded"}
    failed = attempts[bad.id]
    assert (failed.attributes or {})["jobwarden.job.outcome"] == "failed:error"
    assert failed.status.status_code is trace.StatusCode.ERROR


def test_a_batch_is_one_span_and_every_row_carries_its_context(
        client: jobwarden.Client, spans: InMemorySpanExporter, dsn: str) -> None:
    results = client.enqueue_many(testjobs.Record, [{"n": n} for n in range(40)])  # COPY path
    (span,) = named(spans, "jobwarden.enqueue")
    assert (span.attributes or {})["jobwarden.batch.size"] == 40
    contexts = {stored_context(dsn, r.id) for r in results[::13]}
    assert len(contexts) == 1 and f"{span.context.trace_id:032x}" in (contexts.pop() or "")


def test_without_opentelemetry_nothing_is_traced_or_stored(
        client: jobwarden.Client, monkeypatch: pytest.MonkeyPatch, dsn: str) -> None:
    monkeypatch.setattr(tracing, "_INSTALLED", False)
    assert tracing.enqueue_span([]) is None
    enqueued = client.enqueue(testjobs.Record, None)
    assert stored_context(dsn, enqueued.id) is None
    # And the package imports and builds workers with the API absent altogether.
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "import jobwarden, jobwarden.assembly, jobwarden.observability.tracing as t\n"
            "assert not t.enabled()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


_WITHOUT_SDK = """
import sys, threading
from opentelemetry import trace
import jobwarden
from jobwarden import settings
from jobwarden.assembly import build_worker
from jobwarden.db.database import Database

assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
seen = {}
done = threading.Event()

@jobwarden.job
def probe(n: int) -> None:
    seen[n] = trace.get_current_span().get_span_context().trace_id
    if len(seen) == 2:
        done.set()

with Database(sys.argv[1]) as db:
    client = jobwarden.Client(database=db)
    plain = client.enqueue(probe, {"n": 1}).id
    carried = client.enqueue(probe, {"n": 2}).id
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.jobs SET trace_context = %s WHERE id = %s",
                     (sys.argv[2], carried))
    assert client.job(plain).trace_context is None
    worker = build_worker(db, settings.WorkerSettings(http_port=None, concurrency=1))
    worker.start()
    assert done.wait(60)
    worker.stop()
print(f"{seen[1]:032x} {seen[2]:032x}")
"""


def test_without_an_sdk_a_job_sees_the_trace_context_it_was_enqueued_with(dsn: str) -> None:
    """With the API but no SDK the attempt's span is skipped when the job carries no
    context; one that does still runs inside its enqueuer's trace (propagation works
    without an SDK)."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    carried = json.dumps({"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"})
    found = subprocess.run([sys.executable, "-c", _WITHOUT_SDK, dsn, carried],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.split() == ["0" * 32, trace_id]


def test_jobs_show_and_the_console_show_the_stored_trace_context(
        client: jobwarden.Client, spans: InMemorySpanExporter, dsn: str) -> None:
    enqueued = client.enqueue(testjobs.Record, {"n": 1})
    (span,) = named(spans, "jobwarden.enqueue")
    trace_id = f"{span.context.trace_id:032x}"
    record = client.job(enqueued.id)
    assert record.trace_context is not None and record.trace_id == trace_id
    assert client.job(client.enqueue(testjobs.Record, None).id).trace_id is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    env["JOBWARDEN_DSN"] = dsn
    shown = subprocess.run([sys.executable, "-m", "jobwarden", "jobs", "show",
                            str(enqueued.id), "--json"], env=env, capture_output=True,
                           text=True, timeout=60, check=True)
    as_json = json.loads(shown.stdout)
    assert as_json["trace_id"] == trace_id
    assert json.loads(as_json["trace_context"])["traceparent"].split("-")[1] == trace_id
    table = subprocess.run([sys.executable, "-m", "jobwarden", "jobs", "show",
                            str(enqueued.id)], env=env, capture_output=True, text=True,
                           timeout=60, check=True)
    assert f"trace_id: {trace_id}" in table.stdout and "traceparent" in table.stdout
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from jobwarden.console.app import build_app
    from jobwarden.console.settings import ConsoleSettings
    with TestClient(build_app(client, ConsoleSettings()), base_url="http://127.0.0.1") as http:
        page = http.get(f"/jobs/{enqueued.id}")
    assert page.status_code == 200 and 'id="job-trace"' in page.text
    assert trace_id in page.text


def test_a_job_without_a_trace_context_shows_none(client: jobwarden.Client,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_INSTALLED", False)
    record = client.job(client.enqueue(testjobs.Record, None).id)
    assert record.trace_context is None and record.trace_id is None
    assert "trace_id" not in record.as_json()


_NO_PROVIDER = """
import json, sys
from opentelemetry import baggage, context, propagate, trace
import jobwarden
from jobwarden.observability import tracing
from jobwarden.db.database import Database
from tests.support import testjobs

assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
with Database(sys.argv[1]) as db:
    client = jobwarden.Client(database=db)
    assert tracing.enqueue_span([client.spec(testjobs.Record, None)]) is None
    plain = client.enqueue(testjobs.Record, None).id
    token = context.attach(propagate.extract({"traceparent": sys.argv[2]}))
    parented = client.enqueue(testjobs.Record, None).id
    context.detach(token)
    token = context.attach(baggage.set_baggage("tenant", "t1"))
    carrying = client.enqueue(testjobs.Record, None).id
    context.detach(token)
    print(json.dumps([client.job(i).trace_context for i in (plain, parented, carrying)]))
"""


def test_without_a_provider_an_enqueue_still_carries_a_parent_or_baggage(dsn: str) -> None:
    """No tracer provider configured: a plain enqueue builds no span and stores no
    context (the fast path), but a parent span in the current context (extracted from
    a request) or baggage is still carried to the job, as the no-op span carried it."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    found = subprocess.run([sys.executable, "-c", _NO_PROVIDER, dsn, traceparent],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    plain, parented, carrying = json.loads(found.stdout)
    assert plain is None
    assert json.loads(parented)["traceparent"] == traceparent
    assert json.loads(carrying) == {"baggage": "tenant=t1"}
