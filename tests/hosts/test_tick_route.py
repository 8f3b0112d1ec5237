"""The /tick route: every security and behaviour rule, each as its own test."""

from __future__ import annotations

import hmac
import http.client
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import jobwarden
from jobwarden import tick
from jobwarden.assembly import build_worker
from jobwarden.db.database import Database
from jobwarden.settings import WorkerSettings
from jobwarden.tick import route as tick_route
from jobwarden.worker.extensions import Extension
from jobwarden.worker.worker import Worker
from tests.conftest import FAST, audit_rows
from tests.support import testjobs
from tests.support.hostjobs import fake_running_job, run_cli
from tests.support.waiting import wait_for

TOKEN = "tick-token-" + "s3cr3t-0123456789abcdef"
HOST = "tick-host"
JobStatus = jobwarden.JobStatus


@pytest.fixture
def ticked(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    """A worker serving HTTP whose own loops claim and reap nothing: only ticks do.

    Its reaper is off (``reap_interval=0``): with the usual fast test interval it
    raced the tick for a stale claim, and on a slower (fresh) machine it won, so a
    tick that reaps looked like one that did not.
    """
    for name in ("JOBWARDEN_TICK_TOKEN", "JOBWARDEN_TICK_TOKEN_FILE",
                 "JOBWARDEN_TICK_TOKEN_IN_QUERY", "JOBWARDEN_TICK_MAX_JOBS_LIMIT",
                 "JOBWARDEN_TICK_TIMEOUT_LIMIT", "JOBWARDEN_TICK_MAX_JOBS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JOBWARDEN_TICK_TOKEN", TOKEN)
    database = Database(dsn, min_size=1, max_size=8)
    worker = build_worker(database, WorkerSettings(**{**FAST, "host": HOST, "http_port": 0,
                                                      "http_host": "127.0.0.1",
                                                      "reap_interval": 0}),
                          extra=[lambda _worker: _NoClaims()],  # no claim of its own, ever
                          tick_schedules=lambda: schedule_runner())
    worker.start()
    yield worker
    worker.stop(timeout=5)
    database.close()


class _NoClaims(Extension):
    """A claim gate that lets nothing through: only ticks run jobs on this worker."""

    def claim_gate(self, free: int) -> int:
        return 0


#: The schedule pass the ticked worker's ticks run (tests swap it; None: no schedules).
_schedule_pass: list[Callable[[], object] | None] = [None]


def schedule_runner() -> object:
    run = _schedule_pass[0]
    return None if run is None else run()


@pytest.fixture(autouse=True)
def _no_schedule_runner() -> Iterator[None]:
    _schedule_pass[0] = None
    yield
    _schedule_pass[0] = None


def call(worker: Worker, method: str = "POST", target: str = "/tick", *,
         headers: dict[str, str] | None = None, token: str | None = TOKEN,
         body: bytes = b"") -> tuple[int, dict[str, Any]]:
    assert worker.http is not None
    conn = http.client.HTTPConnection("127.0.0.1", worker.http.port, timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        if token is not None:
            conn.putheader("X-Jobwarden-Token", token)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def _pending(client: jobwarden.Client, n: int = 1) -> list[int]:
    return [client.enqueue(testjobs.Record, {"n": i}).id for i in range(n)]


def _statuses(client: jobwarden.Client, ids: list[int]) -> list[JobStatus]:
    return [client.job(i).status for i in ids]


# -- configuration ----------------------------------------------------------------------


def test_the_route_is_not_served_without_a_token(ticked: Worker, client: jobwarden.Client,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBWARDEN_TICK_TOKEN")
    ids = _pending(client)
    assert call(ticked)[0] == 404
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_a_token_file_configures_the_route(ticked: Worker, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBWARDEN_TICK_TOKEN")
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    monkeypatch.setenv("JOBWARDEN_TICK_TOKEN_FILE", str(secret))
    assert call(ticked)[0] == 200
    assert call(ticked, token="other")[0] == 403


# -- who may call -----------------------------------------------------------------------


def test_a_missing_token_is_forbidden(ticked: Worker, client: jobwarden.Client) -> None:
    ids = _pending(client)
    assert call(ticked, token=None) == (403, {"ok": False, "error": "forbidden"})
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_a_wrong_token_is_forbidden(ticked: Worker, client: jobwarden.Client) -> None:
    ids = _pending(client)
    assert call(ticked, token=TOKEN + "x")[0] == 403
    assert call(ticked, token=TOKEN[:-1])[0] == 403
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_any_forwarding_header_is_forbidden_even_empty(ticked: Worker,
                                                       client: jobwarden.Client) -> None:
    ids = _pending(client)
    for header in sorted(tick.FORWARDING_HEADERS):
        assert call(ticked, headers={header: ""})[0] == 403, header
        assert call(ticked, headers={header.upper(): "10.0.0.1"})[0] == 403, header
    assert len(tick.FORWARDING_HEADERS) == 11
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_the_query_string_token_is_refused_unless_allowed(
        ticked: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    assert call(ticked, target=f"/tick?token={TOKEN}", token=None)[0] == 403
    monkeypatch.setenv("JOBWARDEN_TICK_TOKEN_IN_QUERY", "true")
    assert call(ticked, target=f"/tick?token={TOKEN}", token=None)[0] == 200
    assert call(ticked, target="/tick?token=wrong", token=None)[0] == 403


def test_the_token_is_compared_in_constant_time_on_digests(ticked: Worker) -> None:
    with mock.patch.object(tick_route.hmac, "compare_digest",
                           wraps=hmac.compare_digest) as compare:
        assert call(ticked, token="not-the-token")[0] == 403
        assert call(ticked)[0] == 200
    assert compare.call_count == 2
    for given, expected in (c.args for c in compare.call_args_list):
        assert len(given) == len(expected) == 32  # SHA-256 digests, not the raw tokens
        assert TOKEN.encode() not in (given, expected)


# -- methods and parameters -------------------------------------------------------------


def test_get_and_post_run_a_tick(ticked: Worker, client: jobwarden.Client) -> None:
    for method in ("GET", "POST"):
        ids = _pending(client)
        status, body = call(ticked, method)
        assert status == 200 and body["ok"] is True and body["ran"] == 1, method
        assert body["outcomes"] == {"completed": 1} and body["host"] == HOST
        assert _statuses(client, ids) == [JobStatus.COMPLETED]
        assert client.job(ids[0]).claimed_by == HOST


def test_other_methods_are_not_allowed(ticked: Worker, client: jobwarden.Client) -> None:
    ids = _pending(client)
    for method in ("PUT", "DELETE", "PATCH", "HEAD"):
        assert call(ticked, method)[0] == 405, method
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_max_jobs_is_a_request_parameter(ticked: Worker, client: jobwarden.Client) -> None:
    ids = _pending(client, 5)
    status, body = call(ticked, "GET", "/tick?max_jobs=3")
    assert status == 200 and body["ran"] == 3 and body["maxJobs"] == 3
    assert sorted(_statuses(client, ids)).count(JobStatus.COMPLETED) == 3
    status, body = call(ticked, body=json.dumps({"max_jobs": 5}).encode(),
                        headers={"Content-Type": "application/json"})
    assert body["ran"] == 2 and body["stopped"] == "no_job"


def test_max_jobs_is_bounded_by_the_server_maximum(ticked: Worker, client: jobwarden.Client,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBWARDEN_TICK_MAX_JOBS_LIMIT", "2")
    ticked_route = ticked.http.routes[tick.PATH] if ticked.http else None
    assert isinstance(ticked_route, tick.TickRoute)
    ticked_route.ticker.limits = tick.TickLimits.from_env()
    _pending(client, 5)
    status, body = call(ticked, "GET", "/tick?max_jobs=100")
    assert status == 200 and body["ran"] == 2 and body["maxJobs"] == 2


def test_the_per_job_timeout_is_bounded_by_the_server_maximum(
        ticked: Worker, client: jobwarden.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBWARDEN_TICK_TIMEOUT_LIMIT", "0.3")
    route = ticked.http.routes[tick.PATH] if ticked.http else None
    assert isinstance(route, tick.TickRoute)
    route.ticker.limits = tick.TickLimits.from_env()
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 10}).id

    status, body = call(ticked, "GET", "/tick?timeout=100")

    assert status == 200 and body["timeout"] == 0.3 and body["outcomes"] == {"timeout": 1}
    record = client.job(job_id)
    assert "timeout" in (record.last_error or "") and record.attempts == 1


def test_bad_parameters_are_refused_and_run_nothing(ticked: Worker,
                                                    client: jobwarden.Client) -> None:
    ids = _pending(client)
    for target in ("/tick?max_jobs=lots", "/tick?max_jobs=-1", "/tick?timeout=0",
                   "/tick?timeout=nan"):
        status, body = call(ticked, "GET", target)
        assert status == 400 and body["ok"] is False and body["error"], target
    status, body = call(ticked, body=b"{not json", headers={"Content-Type": "application/json"})
    assert status == 400
    assert _statuses(client, ids) == [JobStatus.PENDING]


# -- overlap, failure, logs ---------------------------------------------------------------


def test_an_overlapping_tick_on_the_same_host_is_skipped(ticked: Worker, dsn: str,
                                                         client: jobwarden.Client) -> None:
    job_id = client.enqueue(testjobs.Sleepy, {"seconds": 1.0}).id
    first: list[tuple[int, dict[str, Any]]] = []
    runner = threading.Thread(target=lambda: first.append(call(ticked)))
    runner.start()
    wait_for(lambda: audit_rows(dsn, "start"), message="the first tick's job to start")

    assert call(ticked) == (200, mock.ANY)
    assert call(ticked)[1]["skipped"] is True and call(ticked)[1]["ok"] is True

    runner.join(timeout=30)
    assert first[0][1]["skipped"] is False and first[0][1]["ran"] == 1
    assert client.job(job_id).status is JobStatus.COMPLETED


def test_a_tick_running_in_another_process_on_the_host_makes_this_one_skip(
        ticked: Worker, db: Database, client: jobwarden.Client) -> None:
    ids = _pending(client)
    call(ticked, "GET", "/tick?max_jobs=0")  # the host row exists
    assert db.hosts.tick_acquire(host=HOST, owner=uuid.uuid4(), ttl_seconds=60)

    status, body = call(ticked)

    assert status == 200 and body["skipped"] is True
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_a_failed_tick_returns_only_a_request_id_and_logs_the_error(
        ticked: Worker, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise RuntimeError("schedules table on fire 4711")

    _schedule_pass[0] = broken
    with caplog.at_level(logging.ERROR, logger="jobwarden.tick"):
        status, body = call(ticked)

    assert status == 500
    assert set(body) == {"ok", "requestId"} and body["ok"] is False
    logged = [r for r in caplog.records if body["requestId"] in r.getMessage()]
    assert logged and "schedules table on fire 4711" in caplog.text


def test_the_token_never_appears_in_the_logs(ticked: Worker, client: jobwarden.Client,
                                             monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("JOBWARDEN_TICK_TOKEN_IN_QUERY", "true")
    _pending(client)
    with caplog.at_level(logging.DEBUG, logger="jobwarden"):
        call(ticked, "GET", f"/tick?token={TOKEN}&max_jobs=1", token=None)
        call(ticked)
        call(ticked, token=TOKEN + "-wrong")
        _schedule_pass[0] = lambda: (_ for _ in ()).throw(ValueError(f"token {TOKEN}"))
        call(ticked)

    assert "/tick?token=[redacted]" in caplog.text  # the request line was logged ...
    assert TOKEN not in caplog.text  # ... without the token
    assert TOKEN[:12] not in caplog.text


# -- a tick is a worker's tick -----------------------------------------------------------


def test_a_tick_respects_a_drain(ticked: Worker, client: jobwarden.Client) -> None:
    call(ticked, "GET", "/tick?max_jobs=0")
    client.hosts.drain(host=HOST)
    ids = _pending(client)

    status, body = call(ticked)

    assert status == 200 and body["draining"] is True and body["ran"] == 0
    assert body["stopped"] == "draining"
    assert _statuses(client, ids) == [JobStatus.PENDING]


def test_a_tick_respects_the_host_cap(ticked: Worker, client: jobwarden.Client,
                                      db: Database) -> None:
    fake_running_job(db, client, host=HOST)
    client.hosts.set_pool_cap("default", 1)
    ids = _pending(client)

    status, body = call(ticked)

    assert status == 200 and body["ran"] == 0 and body["stopped"] == "no_job"
    assert _statuses(client, ids) == [JobStatus.PENDING]


def _claim_expired(db: Database, job_id: int) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT claim_expires_at < now() FROM jobwarden.jobs WHERE id = %s",
                           (job_id,)).fetchone()
    return bool(row and row[0])


def test_a_tick_reaps_and_runs_due_schedules(ticked: Worker, client: jobwarden.Client,
                                             db: Database) -> None:
    calls: list[str] = []

    def schedules() -> int:
        calls.append("ran")
        return 3

    _schedule_pass[0] = schedules
    stale = client.enqueue(testjobs.Record).id
    db.jobs.claim(host="dead-host", limit=1, grace_seconds=0.01)
    wait_for(lambda: _claim_expired(db, stale), message="the claim to expire (database clock)")

    status, body = call(ticked, "GET", "/tick?max_jobs=0")

    assert status == 200 and body["scheduled"] == 3 and len(calls) == 1
    assert body["reaped"] == 1 and client.job(stale).status is JobStatus.PENDING


def test_jobwarden_tick_runs_one_tick_without_a_token(client: jobwarden.Client,
                                                      dsn: str) -> None:
    ids = _pending(client, 3)

    done = run_cli(dsn, "tick", "--app", "tests.support.testjobs", "--host", "cli-tick",
                   "--max-jobs", "2", "--json", env={"JOBWARDEN_TICK_TOKEN": ""})

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ran"] == 2 and report["outcomes"] == {"completed": 2}
    assert sorted(s.value for s in _statuses(client, ids)) == ["completed", "completed",
                                                               "pending"]
    assert {client.job(i).claimed_by for i in ids} == {"cli-tick", None}
