"""``enqueue_many`` as one statement (job_insert_batch): what its shortcuts must keep.

The batch sends the shared columns once and the data and keys as one JSON array
each, checked per column instead of per row. These tests fail if that loses a
row's own result, changes what is stored, lets a bad row through or stores part
of a batch.
"""

from __future__ import annotations

import datetime
import random
import string
import threading
from collections.abc import Iterator

import psycopg
import pytest

import jobwarden
from jobwarden.db import jobs as db_jobs
from jobwarden.db.database import Database
from jobwarden.structs.jobs import EnqueueResult
from tests.support import testjobs
from tests.support.namedqueries import counting

#: Text at the edges of JSON and UTF-8: raw non-ASCII (BMP and astral), a literal
#: backslash-u0000 (not a NUL), escapes, quotes, DEL, a BOM, and keys like them.
TRICKY = [
    {"text": "gr\u00fc\u00dfe \u2603 \U0001f600", "literal": "\\u0000 is not a NUL"},
    {"quote\"key": ["tab\t", "line\n", "\u007f", "\ufeff", 1.5, -0.0, 2**53, None, True]},
    {"\u00e9t\u00e9": {"nested": [[], {}, "", "\\"]}, "big": 10**30, "small": 1e-300},
    "a bare string", 0, None, [], ["\U0010ffff", "\u2028\u2029"],
]


def _rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT count(*) FROM jobwarden.jobs").fetchone()
    assert found is not None
    return int(found[0])


def test_every_payload_is_stored_as_the_value_passed(client: jobwarden.Client) -> None:
    datas = TRICKY * 20
    keys = [f"\u00fcnique-{n}-\U0001f600" for n in range(len(datas))]
    results = client.enqueue_many(testjobs.Record, datas, unique_keys=keys)
    for data, key, result in zip(datas, keys, results, strict=True):
        record = client.job(result.id)
        assert record.data == data
        assert type(record.data) is type(data)
        assert record.unique_key == key


@pytest.mark.parametrize("bad", ["nul \x00 inside", "lone \ud800 surrogate",
                                 {"key \x00": 1}, {"\udfff": 1}, float("nan"), {1, 2}])
@pytest.mark.parametrize("where", [0, 37, 99])
def test_a_bad_payload_anywhere_refuses_the_batch_with_its_own_error(
        client: jobwarden.Client, dsn: str, bad: object, where: int) -> None:
    """The batch's one ``json.dumps`` must not let through what one item's check
    refuses, and the error is the one enqueueing that item alone raises."""
    with pytest.raises(jobwarden.InvalidPayload) as alone:
        client.enqueue(testjobs.Record, bad)
    datas: list[object] = [{"n": n, "ok": "\\u0000"} for n in range(100)]
    datas[where] = bad
    with pytest.raises(jobwarden.InvalidPayload) as batch:
        client.enqueue_many(testjobs.Record, datas)
    assert str(batch.value) == str(alone.value)
    assert _rows(dsn) == 0


@pytest.mark.parametrize("bad", ["nul \x00 key", "lone \ud800", "   "])
def test_a_bad_unique_key_anywhere_refuses_the_batch(client: jobwarden.Client, dsn: str,
                                                     bad: str) -> None:
    keys: list[str | None] = [f"k-{n}" if n % 2 else None for n in range(50)]
    keys[31] = bad
    with pytest.raises(ValueError, match="unique_key"):
        client.enqueue_many(testjobs.Record, [None] * 50, unique_keys=keys)
    assert _rows(dsn) == 0


def test_the_first_bad_row_is_reported_whatever_column_it_fails_in(
        client: jobwarden.Client) -> None:
    """Rows are checked column by column for speed, but the error names the first
    bad row, as checking row by row did: here row 3's key before row 8's data."""
    datas: list[object] = [{"n": n} for n in range(10)]
    datas[8] = {"x": float("inf")}
    keys: list[str | None] = [None] * 10
    keys[3] = "\x00"
    with pytest.raises(jobwarden.InvalidInput, match="unique_key"):
        client.enqueue_many(testjobs.Record, datas, unique_keys=keys)
    keys[3] = None
    with pytest.raises(jobwarden.InvalidPayload):
        client.enqueue_many(testjobs.Record, datas, unique_keys=keys)


def _incompressible(length: int) -> str:
    rng = random.Random(16)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


@pytest.fixture
def refusing_server(dsn: str) -> Iterator[dict[str, bool]]:
    """The server refuses any job row whose data is ``{"refuse": true}`` (a trigger):
    a row that passes every client check and fails in the server."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE FUNCTION jobwarden.refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.data = '{"refuse": true}'::jsonb THEN
                    RAISE EXCEPTION 'refused by the test trigger';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_marked BEFORE INSERT ON jobwarden.jobs
                FOR EACH ROW EXECUTE FUNCTION jobwarden.refuse_marked();""")
    yield {"refuse": True}


@pytest.mark.parametrize("where", [0, 500, 999])
def test_a_row_the_server_refuses_stores_nothing_of_the_batch(
        client: jobwarden.Client, db: Database, dsn: str, where: int,
        refusing_server: dict[str, bool]) -> None:
    """A row that passes the client's checks and fails in the server: the batch is
    one statement, so no row of it is stored, no id is reported and no worker is
    woken."""
    datas: list[object] = [{"n": n} for n in range(1000)]
    datas[where] = refusing_server
    listener = db.listener("jobs")
    try:
        assert listener.wait(0.05) == []  # connected and listening
        with pytest.raises(psycopg.errors.RaiseException, match="test trigger"):
            client.enqueue_many(testjobs.Record, datas)
        assert _rows(dsn) == 0
        client.enqueue(testjobs.Record, None, queue="after")  # the pool still works
        assert [p for _c, p in listener.wait(5.0)] == ["after"]
    finally:
        listener.close()


def test_a_refused_batch_in_the_callers_transaction_leaves_nothing(
        client: jobwarden.Client, dsn: str, refusing_server: dict[str, bool]) -> None:
    datas: list[object] = [None] * 100
    datas[50] = refusing_server
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.RaiseException), \
            conn.transaction():
        client.enqueue_many(testjobs.Record, [None] * 10, conn=conn)
        client.enqueue_many(testjobs.Record, datas, conn=conn)
    assert _rows(dsn) == 0


@pytest.mark.parametrize("batch", [False, True])
def test_a_unique_key_too_long_for_its_index_is_refused_and_nothing_is_stored(
        client: jobwarden.Client, dsn: str, batch: bool) -> None:
    """The key is a btree key: 2,000 bytes of UTF-8 at most. Longer keys failed in the
    server ("index row size ... exceeds") as a database fault, not as bad input."""
    longest = _incompressible(2000)
    too_long = "\u00e9" * 1001  # 1,001 characters, 2,002 bytes
    for key, message in ((too_long, "2002 bytes"), (longest + "x", "2001 characters")):
        with pytest.raises(jobwarden.InvalidInput, match=message):
            if batch:
                client.enqueue_many(testjobs.Record, [None, None], unique_keys=["ok", key])
            else:
                client.enqueue(testjobs.Record, None, unique_key=key)
    assert _rows(dsn) == 0
    if batch:
        [result] = client.enqueue_many(testjobs.Record, [None], unique_keys=[longest])
    else:
        result = client.enqueue(testjobs.Record, None, unique_key=longest)
    assert client.job(result.id).unique_key == longest  # type: ignore[union-attr]


def test_every_option_is_stored_as_a_single_enqueue_stores_it(
        client: jobwarden.Client, db: Database) -> None:
    now = db.now()
    options = [
        {"queue": "mail", "priority": -7, "max_retries": 9, "timeout": 12.5,
         "idempotent": False, "delay": 90},
        {"run_at": now + datetime.timedelta(days=3), "priority": 2**31 - 1},
        {"delay": datetime.timedelta(minutes=5), "pod_run": "JobSchedule/ns/name"},
        {},
    ]
    # Each call is its own enqueue span: with a tracer provider set (by any earlier
    # test in this process) the two calls store different trace contexts.
    ignored = {"id", "unique_key", "run_at", "created_at", "updated_at", "data",
               "trace_context", "trace_id"}
    for option in options:
        batch = client.enqueue_many(testjobs.SleepyOnce, [{"seconds": n} for n in range(3)],
                                    **option)
        single = client.enqueue(testjobs.SleepyOnce, {"seconds": 0}, **option)
        row_b = client.job(single.id)
        for n, result in enumerate(batch):
            row_a = client.job(result.id)
            assert row_a.data == {"seconds": n}
            assert ({k: v for k, v in row_a.as_json().items() if k not in ignored}
                    == {k: v for k, v in row_b.as_json().items() if k not in ignored})
            if "run_at" in option:
                assert row_a.run_at == option["run_at"] == row_b.run_at
            else:  # the database's clock, plus the delay
                delay = option.get("delay", 0)
                seconds = delay.total_seconds() if isinstance(delay, datetime.timedelta) \
                    else delay
                assert now + datetime.timedelta(seconds=seconds) <= row_a.run_at <= row_b.run_at


def test_a_batch_too_large_for_one_json_value_goes_through_copy(
        client: jobwarden.Client, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_jobs, "BATCH_JSON_MAX_BYTES", 100)
    calls = counting(db, monkeypatch)
    existing = client.enqueue(testjobs.Record, None, unique_key="k-7")
    calls.clear()
    results = client.enqueue_many(testjobs.Record, TRICKY * 10,
                                  unique_keys=[f"k-{n}" for n in range(len(TRICKY) * 10)])
    assert calls[0] == "job_copy_begin"
    assert [r.duplicate for r in results] == [n == 7 for n in range(len(results))]
    assert results[7].id == existing.id
    assert [client.job(r.id).data for r in results if not r.duplicate] == \
        [d for n, d in enumerate(TRICKY * 10) if n != 7]


@pytest.mark.parametrize("path", ["batch", "specs", "small specs"])
def test_concurrent_batches_get_exactly_one_row_per_unique_key(dsn: str, path: str) -> None:
    """Eight clients enqueue overlapping keyed batches at once, half of them in the
    reverse order, three rounds: one row per key, every result names that row (new
    for exactly one of them, duplicate for the rest), and no deadlock (rows go in in
    key order on every path: batch statement, COPY, the one-statement INSERT)."""
    rounds, size, clients = 3, 400, 8
    results: dict[tuple[int, int], dict[str, EnqueueResult]] = {}
    barrier = threading.Barrier(clients)
    failures: list[BaseException] = []

    def enqueuer(index: int) -> None:
        try:
            with jobwarden.Client(dsn, max_connections=1) as c:
                for round_ in range(rounds):
                    keys = [f"key-{round_}-{n:03d}" for n in range(size)]
                    mine = keys[index * 40:] + keys[:index * 40]
                    if index % 2:
                        mine.reverse()
                    specs = [c.spec(testjobs.Record, {"by": index}, unique_key=k)
                             for k in mine]
                    barrier.wait()
                    if path == "batch":
                        got = c.enqueue_many(testjobs.Record, [{"by": index}] * size,
                                             unique_keys=mine)
                    else:
                        got = []
                        step = size if path == "specs" else db_jobs.COPY_MIN_ROWS - 1
                        for first in range(0, size, step):
                            got += c.enqueue_specs(specs[first:first + step])
                    results[index, round_] = dict(zip(mine, got, strict=True))
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=enqueuer, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        stored = dict(conn.execute("SELECT unique_key, id FROM jobwarden.jobs").fetchall())
    assert len(stored) == rounds * size
    for (_index, _round), got in results.items():
        assert all(result.id == stored[key] for key, result in got.items())
    for key in stored:
        round_ = int(key.split("-")[1])
        seen = [results[i, round_][key] for i in range(clients)]
        assert sum(not r.duplicate for r in seen) == 1


def test_an_empty_batch_is_no_statement(client: jobwarden.Client, db: Database,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db, "rows", None)  # any statement would fail
    assert client.enqueue_many(testjobs.Record, []) == []
