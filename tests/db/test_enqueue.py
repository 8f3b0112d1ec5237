"""Enqueue: single and batch, unique keys decided by the database, delays, payload checks."""

from __future__ import annotations

import dataclasses
import datetime
import threading

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from jobwarden.db.jobs import COPY_MIN_ROWS
from jobwarden.structs.jobs import EnqueueResult, JobSpec
from tests.support import testjobs
from tests.support.namedqueries import counting


def test_enqueue_returns_the_id_and_a_duplicate_returns_the_same_id(
        client: jobwarden.Client) -> None:
    first = client.enqueue(testjobs.Record, {"a": 1}, unique_key="report:2026-11-29")
    second = client.enqueue(testjobs.Record, {"a": 2}, unique_key="report:2026-11-29")
    assert not first.duplicate
    assert second.duplicate
    assert second.id == first.id
    assert client.job(first.id).data == {"a": 1}
    assert client.stats()["default"]["pending"] == 1


def test_enqueue_copies_the_class_settings_into_the_row(client: jobwarden.Client) -> None:
    record = client.job(client.enqueue(testjobs.SleepyOnce, {"seconds": 1}).id)
    assert record.job_class == "tests.support.testjobs:SleepyOnce"
    assert record.idempotent is False
    assert record.timeout_seconds == 120
    assert record.max_retries == 3
    assert record.status is jobwarden.JobStatus.PENDING


def test_enqueue_many_is_one_statement_and_keeps_its_order(
        client: jobwarden.Client, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(db, monkeypatch)
    results = client.enqueue_many(testjobs.Record, [{"n": n} for n in range(1000)])
    assert calls == ["job_insert_batch"]  # ids, rows and NOTIFY: one round trip
    assert len({r.id for r in results}) == 1000
    assert not any(r.duplicate for r in results)
    assert results == sorted(results, key=lambda r: r.id)
    assert [client.job(r.id).data for r in results[::250]] == [{"n": n}
                                                               for n in range(0, 1000, 250)]


def test_a_large_batch_of_specs_is_one_copy_and_keeps_its_order(
        client: jobwarden.Client, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [client.spec(testjobs.Record, {"n": n}) for n in range(1000)]
    calls = counting(db, monkeypatch)
    results = client.enqueue_specs(specs)
    assert calls == ["job_copy_begin"]  # then the COPY itself: no per-row statement
    assert len({r.id for r in results}) == 1000
    assert results == sorted(results, key=lambda r: r.id)
    assert [client.job(r.id).data for r in results[::250]] == [{"n": n}
                                                               for n in range(0, 1000, 250)]


def _enqueue(client: jobwarden.Client, path: str, datas: list[object],
             keys: list[str | None]) -> list[EnqueueResult]:
    """``enqueue_many`` (one batch statement) or the same rows as specs (COPY/INSERT)."""
    if path == "batch":
        return client.enqueue_many(testjobs.Record, datas, unique_keys=keys)
    return client.enqueue_specs([client.spec(testjobs.Record, d, unique_key=k)
                                 for d, k in zip(datas, keys, strict=True)])


#: The named queries each path runs for a batch of 100 with fresh keys, with keys
#: that clash with a stored row, and with keys repeated within the batch.
_PATH_CALLS = {
    "batch": (["job_insert_batch"], ["job_insert_batch", "job_ids_by_unique_key"],
              ["job_insert_batch", "job_ids_by_unique_key"]),
    "specs": (["job_copy_begin"], ["job_copy_begin", "job_insert_many", "job_ids_by_unique_key"],
              ["job_insert_many", "job_ids_by_unique_key"]),  # a repeat never tries COPY
}


@pytest.mark.parametrize("path", ["batch", "specs"])
def test_unique_keys_give_the_same_per_row_results_on_every_path(
        client: jobwarden.Client, db: Database, monkeypatch: pytest.MonkeyPatch,
        path: str) -> None:
    """Every row says whether it is new or a duplicate, and of which row: a key
    stored before, one repeated within the batch, rows without a key among them.
    (A specs batch that clashes is redone by the one-statement INSERT.)"""
    fresh_calls, clash_calls, repeat_calls = _PATH_CALLS[path]
    existing = client.enqueue(testjobs.Record, None, unique_key="k-5")
    calls = counting(db, monkeypatch)
    size = 100
    keys: list[str | None] = [f"k-{n}" for n in range(size)]
    clashing = _enqueue(client, path, [{"n": n} for n in range(size)], keys)
    assert calls == clash_calls
    assert [r.duplicate for r in clashing] == [n == 5 for n in range(size)]
    assert clashing[5].id == existing.id
    assert len({r.id for r in clashing}) == size
    # Nothing of the clash left behind: one row per key, the stored one untouched.
    assert client.stats()["default"]["pending"] == size
    assert client.job(existing.id).data is None
    assert client.job(clashing[6].id).data == {"n": 6}

    calls.clear()
    fresh_keys: list[str | None] = [f"f-{n}" for n in range(size)]
    fresh = _enqueue(client, path, [{"n": n} for n in range(size)], fresh_keys)
    assert calls == fresh_calls
    assert not any(r.duplicate for r in fresh)
    again = _enqueue(client, path, [{"n": n} for n in range(size)], fresh_keys)
    assert [r.id for r in again] == [r.id for r in fresh]
    assert all(r.duplicate for r in again)

    calls.clear()
    mixed: list[str | None] = [None if n % 3 == 0 else f"r-{n % 7}" for n in range(size)]
    repeated = _enqueue(client, path, [{"n": n} for n in range(size)], mixed)
    assert calls == repeat_calls
    first_of: dict[str, int] = {}
    for n, key in enumerate(mixed):
        if key is None:
            assert not repeated[n].duplicate
        elif key in first_of:
            assert repeated[n].duplicate and repeated[n].id == repeated[first_of[key]].id
        else:
            first_of[key] = n
            assert not repeated[n].duplicate
            assert client.job(repeated[n].id).data == {"n": n}
            assert client.job(repeated[n].id).unique_key == key
    new_ids = {r.id for r in repeated if not r.duplicate}
    assert len(new_ids) == sum(1 for k in mixed if k is None) + 7


def test_small_batches_are_one_statement(client: jobwarden.Client, db: Database,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    client.enqueue(testjobs.Record, None, unique_key="k-5")
    calls = counting(db, monkeypatch)
    keyed = client.enqueue_many(testjobs.Record, [{"n": n} for n in range(10)],
                                unique_keys=[f"k-{n % 7}" for n in range(10)])
    assert calls == ["job_insert_batch", "job_ids_by_unique_key"]
    assert [r.duplicate for r in keyed] == [False] * 5 + [True] + [False] + [True] * 3
    assert keyed[5].id == client.db.jobs.recent(limit=2000)[-1].id  # k-5 existed before
    assert keyed[7].id == keyed[0].id  # a duplicate inside the same batch
    calls.clear()
    specs = [client.spec(testjobs.Record, {"n": n}, unique_key=f"s-{n % 7}") for n in range(10)]
    keyed = client.enqueue_specs(specs)
    assert calls == ["job_insert_many", "job_ids_by_unique_key"]
    assert [r.duplicate for r in keyed] == [False] * 7 + [True] * 3


def test_a_copied_batch_stores_every_option_as_the_insert_does(
        client: jobwarden.Client, db: Database) -> None:
    now = db.now()
    at = now + datetime.timedelta(days=2)
    specs = [JobSpec(job_class="a.b:C", data={"n": n}, queue="q" if n % 2 else "default",
                     priority=n % 3, run_at=at if n % 3 == 0 else None,
                     delay_seconds=60.0 if n % 3 == 1 else 0.0, max_retries=n % 4,
                     timeout_seconds=30.5, idempotent=n % 2 == 0, unique_key=f"u-{n}",
                     lease_name="L" if n % 5 == 0 else None, schedule_name="S",
                     on_busy="skip" if n % 5 == 0 else None,
                     lease_ttl_seconds=90.0 if n % 5 == 0 else None)
             for n in range(2 * COPY_MIN_ROWS)]
    copied = db.jobs.insert_many(specs)
    one_by_one = [db.jobs.insert_many([dataclasses.replace(s, unique_key=f"v-{i}")])[0]
                  for i, s in enumerate(specs)]
    ignored = {"id", "unique_key", "run_at", "created_at", "updated_at"}
    for spec, a, b in zip(specs, copied, one_by_one, strict=True):
        row_a, row_b = client.job(a.id), client.job(b.id)
        fields_a = {k: v for k, v in dataclasses.asdict(row_a).items() if k not in ignored}
        fields_b = {k: v for k, v in dataclasses.asdict(row_b).items() if k not in ignored}
        assert fields_a == fields_b
        assert row_a.unique_key == spec.unique_key
        if spec.run_at is not None:
            assert row_a.run_at == at
        else:  # the database's clock, plus the delay
            delay = datetime.timedelta(seconds=spec.delay_seconds)
            assert now + delay <= row_a.run_at <= row_b.run_at


def test_a_copy_in_the_callers_transaction_that_clashes_keeps_the_callers_work(
        client: jobwarden.Client, db: Database) -> None:
    existing = client.enqueue(testjobs.Record, None, unique_key="k-3")
    specs = [JobSpec(job_class="a.b:C", unique_key=f"k-{n}") for n in range(COPY_MIN_ROWS)]
    with db.transaction() as conn:
        mine = db.jobs.insert_many([JobSpec(job_class="a.b:C", unique_key="mine")],
                                   conn=conn)[0]
        results = db.jobs.insert_many(specs, conn=conn)
    assert results[3].id == existing.id and results[3].duplicate
    assert client.job(mine.id).unique_key == "mine"
    assert client.stats()["default"]["pending"] == COPY_MIN_ROWS + 1


def test_concurrent_enqueuers_get_exactly_one_row_per_unique_key(dsn: str) -> None:
    keys = [f"key-{n}" for n in range(100)]
    ids: dict[str, set[int]] = {k: set() for k in keys}
    lock = threading.Lock()
    barrier = threading.Barrier(32)
    errors: list[BaseException] = []

    def enqueuer(offset: int) -> None:
        try:
            with jobwarden.Client(dsn, max_connections=1) as c:
                barrier.wait()
                for n in range(100):
                    key = keys[(n + offset) % 100]
                    result = c.enqueue(testjobs.Record, {"by": offset}, unique_key=key)
                    with lock:
                        ids[key].add(result.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=enqueuer, args=(i * 3,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(len(found) == 1 for found in ids.values()), ids
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT unique_key, count(*) FROM jobwarden.jobs "
                            "GROUP BY unique_key").fetchall()
        assert len(rows) == 100
        assert all(count == 1 for _key, count in rows)
        # The guarantee is the database's own constraint, not the client's care.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO jobwarden.jobs (job_class, unique_key) "
                         "VALUES ('a:B', 'key-1')")


@pytest.mark.parametrize("bad", [{1, 2}, float("nan"), {"when": datetime.datetime.now()}])
def test_data_that_is_not_json_is_refused_and_nothing_is_stored(client: jobwarden.Client,
                                                               bad: object) -> None:
    with pytest.raises(jobwarden.InvalidPayload):
        client.enqueue(testjobs.Record, bad)
    assert client.stats() == {}


def test_bad_enqueue_options_are_refused(client: jobwarden.Client) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        client.enqueue(testjobs.Record, run_at=datetime.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="delay"):
        client.enqueue(testjobs.Record, delay=-1)
    with pytest.raises(ValueError, match="unique_key"):
        client.enqueue(testjobs.Record, unique_key="  ")
    with pytest.raises(jobwarden.UnknownJob, match="cannot import"):
        client.enqueue("no.such.module:Job")
    with pytest.raises(jobwarden.UnknownJob, match="must look like"):
        client.enqueue("not a path", check=False)
    assert client.stats() == {}


def test_a_job_whose_code_lives_only_in_workers_can_be_enqueued_unchecked(
        client: jobwarden.Client) -> None:
    job_id = client.enqueue("elsewhere.jobs:Reindex", {"x": 1}, check=False, timeout=30).id
    record = client.job(job_id)
    assert record.job_class == "elsewhere.jobs:Reindex"
    assert record.timeout_seconds == 30


def test_delay_and_run_at_use_the_database_clock(client: jobwarden.Client, db: Database) -> None:
    now = db.now()
    delayed = client.job(client.enqueue(testjobs.Record, delay=3600).id)
    ahead = delayed.run_at - now
    assert datetime.timedelta(seconds=3599) < ahead < datetime.timedelta(seconds=3700)
    at = now + datetime.timedelta(days=2)
    assert client.job(client.enqueue(testjobs.Record, run_at=at).id).run_at == at
    assert db.jobs.claim(host="h", limit=10, grace_seconds=30) == []


def test_enqueue_notifies_listeners(client: jobwarden.Client, db: Database) -> None:
    listener = db.listener("jobs")
    try:
        assert listener.wait(0.05) == []  # connects and LISTENs
        client.enqueue(testjobs.Record, queue="mail")
        received = listener.wait(2.0)
        assert ("jobwarden_jobs", "mail") in received
    finally:
        listener.close()


#: Strings whose JSON text is the edge of the single encoding (operations.encode_payload):
#: non-ASCII text sent raw, a literal backslash-u0000 (not a NUL), escapes and quotes.
TRICKY_DATA = {"text": "gr\u00fc\u00dfe \u2603 \U0001f600", "literal": "\\u0000 is not a NUL",
               "quote\"key": ["tab\t", "line\n", "\u007f", 1.5, -0.0, 2**53, None, True]}


@pytest.mark.parametrize("count", [1, 5, COPY_MIN_ROWS])
def test_data_is_stored_exactly_through_every_insert_path(
        client: jobwarden.Client, count: int) -> None:
    """One row, the one-statement batch and COPY store the JSON the enqueue encoded
    (once) as the same value the application passed."""
    results = client.enqueue_many(testjobs.Record, [TRICKY_DATA] * count)
    assert all(client.job(r.id).data == TRICKY_DATA for r in results)


@pytest.mark.parametrize("count", [1, 5, COPY_MIN_ROWS])
def test_a_spec_whose_data_was_replaced_stores_the_new_data(
        client: jobwarden.Client, count: int) -> None:
    """A prepared spec carries its payload's JSON; a copy with other data (as the
    operator and recipes make with ``dataclasses.replace``) must not send the old text."""
    prepared = client.spec(testjobs.Record, {"old": 1})
    replaced = dataclasses.replace(prepared, data={"new": 2})
    results = client.enqueue_specs([replaced] * count)
    assert all(client.job(r.id).data == {"new": 2} for r in results)


def test_a_function_job_batch_checks_every_item_against_the_signature(
        client: jobwarden.Client) -> None:
    """The signature is read once per function, but every item is still bound and
    type-checked: a bad item anywhere refuses the whole batch, nothing stored."""
    good = [{"a": n, "b": 1} for n in range(COPY_MIN_ROWS)]
    assert len(client.enqueue_many(testjobs.add, good)) == COPY_MIN_ROWS
    for bad in ({"a": 1}, {"a": 1, "b": 2, "c": 3}, {"a": "1", "b": 2}, {"a": True, "b": 2},
                [1], "text"):
        with pytest.raises(jobwarden.InvalidJobData):
            client.enqueue_many(testjobs.add, [*good, bad])
    assert client.stats()["default"]["pending"] == COPY_MIN_ROWS
    assert len(client.enqueue_many(testjobs.add, [[1, 2], {"b": 2, "a": 1}])) == 2


def test_a_single_enqueue_runs_prepared_and_once_more_as_plain_text_when_lost(
        dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=1) as db:
        client = jobwarden.Client(database=db)
        first = client.enqueue(testjobs.Record, {"n": 1})
        with db.connection() as conn:
            conn.execute("DEALLOCATE ALL")  # as a pooler's other server connection would be
        second = client.enqueue(testjobs.Record, {"n": 2})  # nothing ran twice
        assert db.connections.prepared_misses == 1
        third = client.enqueue(testjobs.Record, {"n": 3})  # prepared again
        assert db.connections.prepared_misses == 1
        with db.connection() as conn:
            rows = conn.execute("SELECT data FROM jobwarden.jobs WHERE id = ANY(%s)"
                                " ORDER BY id", ([first.id, second.id, third.id],)).fetchall()
            held = conn.execute("SELECT count(*) FROM pg_prepared_statements"
                                " WHERE name LIKE 'jw_job_insert_one_visible_%'").fetchone()
        assert [r[0] for r in rows] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert held == (1,)


def _enqueued_metric(queue: str, job_class: str) -> float:
    from jobwarden.observability import metrics
    return metrics.REGISTRY.get_sample_value(
        "jobwarden_jobs_enqueued_total", {"queue": queue, "job_class": job_class}) or 0.0


def test_enqueued_jobs_are_counted_and_duplicates_are_not(client: jobwarden.Client) -> None:
    job_class = "tests.support.testjobs:Record"
    before = _enqueued_metric("default", job_class)
    client.enqueue(testjobs.Record, {"n": 1}, unique_key="counted-once")
    client.enqueue(testjobs.Record, {"n": 2}, unique_key="counted-once")  # a duplicate
    client.enqueue_specs([client.spec(testjobs.Record, {"n": 3}),
                          client.spec(testjobs.Record, {"n": 4}, unique_key="counted-once")])
    assert _enqueued_metric("default", job_class) == before + 2
