"""Exclusive jobs and concurrency keys: the seed PR's specification, on a real worker."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jobwarden
from jobwarden.db.database import Database
from jobwarden.extensions.exclusive import job_lease, lease_window
from jobwarden.observability import metrics
from jobwarden.structs.leases import lease_name
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import leasejobs
from tests.support.waiting import wait_for


def _value(metric: Any, *labels: str) -> float:
    return float(metric.labels(*labels).get())


def _counted(metric: Any, *labels: str, value: float) -> None:
    """The counter reaches ``value``: a worker counts an outcome after its write
    commits, so a test that saw the row change may look before the count moves."""
    wait_for(lambda: _value(metric, *labels) == value,
             message=f"{metric._name}{list(labels)} at {value} (now {_value(metric, *labels)})")


@contextlib.contextmanager
def held_elsewhere(db: Database, name: str, *, ttl: float, renew: bool = False) -> Iterator[int]:
    """Another server holds ``name`` (renewing it every ttl/3 when asked) until the block ends."""
    owner = f"elsewhere-{uuid.uuid4().hex[:6]}"
    got = db.leases.try_acquire(name=name, owner=owner, ttl_seconds=ttl, host="other-host")
    assert got.acquired and got.token is not None
    stop = threading.Event()

    def keep_renewing() -> None:
        while not stop.wait(ttl / 3):
            db.leases.renew(name=name, owner=owner, token=got.token, ttl_seconds=ttl)

    renewer = threading.Thread(target=keep_renewing) if renew else None
    if renewer:
        renewer.start()
    try:
        yield got.token
    finally:
        stop.set()
        if renewer:
            renewer.join()
        db.leases.release(name=name, owner=owner, token=got.token)


def _status(client: jobwarden.Client, job_id: int) -> JobStatus:
    return client.job(job_id).status


def test_the_lease_is_held_during_perform_and_released_after(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(leasejobs.ExclusiveRecord, {"n": 1}).id
    start_worker()
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")

    name = "job:tests.support.leasejobs:ExclusiveRecord"
    [(_, _, _, _, seen)] = audit_rows(dsn, "ran")
    owner, token = seen.split("|")
    uuid.UUID(owner)  # the owner is the attempt's claim token
    record = client.job(job_id)
    assert (record.lease_name, record.lease_token) == (name, int(token))
    assert not record.lease_lost
    assert client.db.leases.owner_of(name) is None
    [row] = client.db.leases.read(name)
    assert row.owner is None and row.token == int(token)


def test_a_lease_held_elsewhere_stops_the_run_and_the_job_waits_pending_with_its_attempt_back(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    labels = ("default", "tests.support.leasejobs:BusyOnce")
    deferred, skipped = _value(metrics.JOBS_DEFERRED, *labels), \
        _value(metrics.JOBS_SKIPPED, *labels, "lease_busy")
    failed = _value(metrics.JOBS_FAILED, *labels, "lease_busy")
    busy = _value(metrics.LEASE_BUSY, "key")
    with held_elsewhere(client.db, "key:busy-key", ttl=20):
        job_id = client.enqueue(leasejobs.BusyOnce).id
        start_worker()
        wait_for(lambda: client.job(job_id).deferrals >= 1, message="deferred")
        wait_for(lambda: _status(client, job_id) is JobStatus.PENDING, message="pending again")
        record = client.job(job_id)
        assert record.attempts == 0
        now = client.db.now()
        # run_at = now + min(remaining lease, 30 s): the holder's 20 s, not sooner.
        assert now + datetime.timedelta(seconds=15) < record.run_at
        assert record.run_at <= now + datetime.timedelta(seconds=20)
        # Checked while the lease is still held elsewhere: its release hands the
        # job over at once (the next test), so after the block it may already run.
        assert audit_rows(dsn, "ran") == []
    # Counted as skipped and deferred, never as failed.
    _counted(metrics.JOBS_DEFERRED, *labels, value=deferred + 1)
    _counted(metrics.JOBS_SKIPPED, *labels, "lease_busy", value=skipped + 1)
    _counted(metrics.LEASE_BUSY, "key", value=busy + 1)
    assert _value(metrics.JOBS_FAILED, *labels, "lease_busy") == failed


def test_a_released_lease_hands_over_to_the_deferred_job_at_once(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    with held_elsewhere(client.db, "key:busy-key", ttl=120):
        job_id = client.enqueue(leasejobs.BusyOnce).id
        start_worker()
        wait_for(lambda: client.job(job_id).deferrals >= 1, message="deferred")
        wait_for(lambda: _status(client, job_id) is JobStatus.PENDING, message="pending again")
    # Released: the job is due now instead of at the lease's expiry, ~120 s on (the
    # bound is a hang bound well inside that, not a speed).
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, timeout=60,
             message="ran right after the release")
    assert len(audit_rows(dsn, "ran")) == 1


def test_a_permanently_busy_key_never_uses_up_retries(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(leasejobs.BusyOnce).id  # max_retries = 1
    with held_elsewhere(client.db, "key:busy-key", ttl=0.3, renew=True):
        start_worker()
        wait_for(lambda: client.job(job_id).deferrals >= 4, message="four busy polls")
        record = client.job(job_id)
        assert record.status is JobStatus.PENDING
        assert record.attempts == 0
        assert audit_rows(dsn, "ran") == []
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="ran once free")
    assert client.job(job_id).attempts == 1
    assert len(audit_rows(dsn, "ran")) == 1


def test_on_busy_skip_drops_the_run_and_counts_it_skipped_not_failed(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    labels = ("default", "tests.support.leasejobs:SkipWhenBusy")
    skipped = _value(metrics.JOBS_SKIPPED, *labels, "on_busy_skip")
    with held_elsewhere(client.db, "key:busy-key", ttl=20):
        job_id = client.enqueue(leasejobs.SkipWhenBusy).id
        start_worker()
        wait_for(lambda: _status(client, job_id).terminal, message="skipped")
    record = client.job(job_id)
    assert record.status is JobStatus.CANCELLED
    assert "skipped: lease 'key:busy-key' busy" in (record.last_error or "")
    _counted(metrics.JOBS_SKIPPED, *labels, "on_busy_skip", value=skipped + 1)
    assert audit_rows(dsn, "ran") == []


def test_on_busy_fail_is_a_failed_attempt_retried_like_any_other(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    labels = ("default", "tests.support.leasejobs:FailWhenBusy")
    failed = _value(metrics.JOBS_FAILED, *labels, "lease_busy")
    with held_elsewhere(client.db, "key:busy-key", ttl=20):
        job_id = client.enqueue(leasejobs.FailWhenBusy).id
        start_worker()
        wait_for(lambda: _status(client, job_id).terminal, message="failed")
    record = client.job(job_id)
    assert record.status is JobStatus.FAILED
    assert record.attempts == 2  # max_retries = 1
    assert "busy" in (record.last_error or "")
    _counted(metrics.JOBS_FAILED, *labels, "lease_busy", value=failed + 1)


def test_an_expired_lease_is_taken_over_and_the_job_runs(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    crashed = client.db.leases.try_acquire(name="key:static-key", owner="crashed-host",
                                           ttl_seconds=0.3)  # never released
    job_id = client.enqueue(leasejobs.StaticKey).id
    start_worker()
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")
    record = client.job(job_id)
    assert record.lease_token is not None and crashed.token is not None
    assert record.lease_token > crashed.token
    assert record.attempts == 1
    assert len(audit_rows(dsn, "ran")) == 1


def test_a_lease_taken_over_during_perform_still_completes_the_job_and_reports_it_lost(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    lost = _value(metrics.LEASE_LOST, "key")
    job_id = client.enqueue(leasejobs.TakenOver).id
    start_worker()
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")
    record = client.job(job_id)
    assert record.lease_lost
    assert record.result == "finished anyway"
    [(_, _, _, _, stolen_token)] = audit_rows(dsn, "stolen")
    assert stolen_token != "not stolen"
    assert client.db.leases.owner_of("key:stolen") == "thief"  # the thief's lease is untouched
    _counted(metrics.LEASE_LOST, "key", value=lost + 1)


class _ExclusiveOnly(jobwarden.Job):
    exclusive = True


class _StaticOnly(jobwarden.Job):
    concurrency_key = "reports"


class _MethodOnly(jobwarden.Job):
    def concurrency_key_for(self, data: Any) -> str | None:
        return f"account-{data['account']}"


def test_lease_names_follow_method_then_static_key_then_exclusive() -> None:
    assert job_lease(leasejobs.Keyed, {"key": "k1"}) == ("key:k1", "key")  # both set: method
    assert job_lease(leasejobs.Keyed, {}) == ("key:static", "key")  # blank method key
    assert job_lease(_StaticOnly, None) == ("key:reports", "key")
    assert job_lease(_MethodOnly, {"account": 7}) == ("key:account-7", "key")
    assert job_lease(_ExclusiveOnly, None) == (
        f"job:{_ExclusiveOnly.path()}", "job")
    assert job_lease(jobwarden.Job, None) is None
    long_key = "k" * 500
    name, kind = job_lease(leasejobs.Keyed, {"key": long_key}) or ("", "")
    assert name == lease_name(f"key:{long_key}") and len(name) == 200 and kind == "key"


def test_the_lease_window_is_the_timeout_plus_at_least_a_minute() -> None:
    assert lease_window(10) == 70
    assert lease_window(300) == 600


def test_a_keyed_job_takes_the_lease_of_its_method_key(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    job_id = client.enqueue(leasejobs.Keyed, {"key": "acct-9"}).id
    start_worker()
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")
    assert client.job(job_id).lease_name == "key:acct-9"


def test_the_batch_heartbeat_moves_the_expiry_forward(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    name = "job:tests.support.leasejobs:SlowExclusive"
    job_id = client.enqueue(leasejobs.SlowExclusive, {"seconds": 1.5}).id
    start_worker()  # heartbeat every 0.2 s
    wait_for(lambda: audit_rows(dsn, "start"), message="started")
    first = client.db.leases.read(name)[0].expires_at
    assert first is not None
    wait_for(lambda: (client.db.leases.read(name)[0].expires_at or first) > first,
             timeout=3, message="expiry moved")
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")
    assert client.db.leases.owner_of(name) is None


def test_job_heartbeat_inside_perform_renews_the_lease(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    job_id = client.enqueue(leasejobs.HeartbeatingExclusive, {"pause": 1.2}).id
    start_worker(heartbeat_interval=30, heartbeat_grace=60)  # no batch renewal meanwhile
    wait_for(lambda: _status(client, job_id) is JobStatus.COMPLETED, message="completed")
    [(_, _, _, _, detail)] = audit_rows(dsn, "expiry")
    before, after = (datetime.datetime.fromisoformat(t) for t in detail.split("|"))
    # Renewed, and before it expired: the expiry moved forward (no batch heartbeat
    # runs within 30 s, so only Job.heartbeat() can have moved it), and the lease
    # was never lost, so the attempt completed holding it.
    assert after > before
    assert client.job(job_id).lease_lost is False


def test_runs_of_an_exclusive_job_never_overlap_across_workers(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    ids = [client.enqueue(leasejobs.SlowExclusive, {"seconds": 0.2}).id for _ in range(4)]
    start_worker(concurrency=2)
    start_worker(concurrency=2)
    wait_for(lambda: all(_status(client, i) is JobStatus.COMPLETED for i in ids), timeout=20,
             message="all completed")
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        spans = conn.execute(
            "SELECT s.at, e.at FROM public.audit s JOIN public.audit e "
            "ON e.job_id = s.job_id AND e.attempt = s.attempt AND e.event = 'end' "
            "WHERE s.event = 'start' ORDER BY s.at").fetchall()
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start
