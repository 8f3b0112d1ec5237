"""The outcome writes run as per-connection prepared statements (issue 16, db/calls.py).

Why it matters: every outcome write (a batch of completions, a failure, a
cancel, a release) and the heartbeat writes the jobs table, and the server
planned each one on every call -- longer than running it for a small batch.
What the shortcut must keep: the same effects, fencing of a stale claim's
outcome (nothing changed, reported as fenced), a generic plan that still looks
rows up by id, and -- when a pooler hands a statement to a server connection
that never saw the PREPARE -- plain text again, each outcome recorded exactly
once.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import jobwarden
from jobwarden.db.calls import MISSES_BEFORE_PLAIN
from jobwarden.db.database import Database
from jobwarden.db.prepared import prepared_form
from jobwarden.structs.jobs import ClaimedJob, Completion, Failure
from jobwarden.structs.states import JobStatus
from tests.support import testjobs

OUTCOME_STATEMENTS = ("job_complete_one", "job_complete_many", "job_fail", "job_cancelled",
                      "job_release", "job_heartbeat_many")


def _prepared_on_server(db: Database) -> set[str]:
    with db.connection() as conn:
        return {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")}


def _claim(client: jobwarden.Client, db: Database, n: int = 1, **options: object
           ) -> list[ClaimedJob]:
    ids = [client.enqueue(testjobs.Noop, **options).id for _ in range(n)]  # type: ignore[arg-type]
    claimed = db.jobs.claim(host="h", limit=n, grace_seconds=30)
    assert sorted(c.id for c in claimed) == sorted(ids)
    return claimed


def _stale(claim: ClaimedJob) -> ClaimedJob:
    """The same job under a claim token that is not (or no longer) its own."""
    return dataclasses.replace(claim, claim_token=uuid.uuid4())


def _complete(db: Database, claims: list[ClaimedJob]) -> set[int]:
    return db.jobs.complete_many([Completion(id=c.id, claim_token=c.claim_token,
                                             result={"ok": c.id}, lease_lost=False)
                                  for c in claims])


def _attempt_rows(dsn: str, job_id: int) -> list[tuple[int, str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(
            "SELECT attempt, outcome, status_after FROM jobwarden.job_attempts"
            " WHERE job_id = %s ORDER BY attempt", (job_id,))]


@pytest.fixture
def db(dsn: str) -> Iterator[Database]:
    """One pooled connection, so every statement is prepared where the test looks."""
    with Database(dsn, min_size=1, max_size=1) as database:
        yield database


def test_every_outcome_write_executes_its_prepared_statement_with_the_same_effect(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    done, pair_1, pair_2, failing, final, cancelled, released = _claim(client, db, 7)
    ack = db.jobs.heartbeat_many([(c.id, c.claim_token) for c in
                                  (done, failing, final, cancelled, released)],
                                 grace_seconds=30)
    assert ack.alive == {done.id, failing.id, final.id, cancelled.id, released.id}
    assert _complete(db, [done]) == {done.id}  # one: job_complete_one
    assert _complete(db, [pair_1, pair_2]) == {pair_1.id, pair_2.id}  # job_complete_many
    assert db.jobs.fail(Failure(id=failing.id, claim_token=failing.claim_token, error="boom",
                                retryable=True, retry_in_seconds=60)) is JobStatus.PENDING
    assert db.jobs.fail(Failure(id=final.id, claim_token=final.claim_token, error="bad",
                                retryable=False, retry_in_seconds=0)) is JobStatus.FAILED
    assert db.jobs.mark_cancelled(job_id=cancelled.id, claim_token=cancelled.claim_token,
                                  error="stop")
    assert db.jobs.release(job_id=released.id, claim_token=released.claim_token,
                           delay_seconds=0.0)

    got = {i: client.job(i) for i in (done.id, failing.id, final.id, cancelled.id,
                                       released.id)}
    assert got[done.id].status is JobStatus.COMPLETED and got[done.id].result == {"ok": done.id}
    assert got[failing.id].status is JobStatus.PENDING and got[failing.id].last_error == "boom"
    assert got[failing.id].run_at > db.now()  # the backoff
    assert got[final.id].status is JobStatus.FAILED
    assert got[cancelled.id].status is JobStatus.CANCELLED
    assert got[released.id].status is JobStatus.PENDING and got[released.id].attempts == 0
    assert _attempt_rows(dsn, done.id) == [(1, "completed", "completed")]
    for c in (pair_1, pair_2):
        assert client.job(c.id).result == {"ok": c.id}
        assert _attempt_rows(dsn, c.id) == [(1, "completed", "completed")]
    assert _attempt_rows(dsn, failing.id) == [(1, "failed", "pending")]

    held = _prepared_on_server(db)
    for name in OUTCOME_STATEMENTS:
        assert prepared_form(name, db.sql(name))[0] in held, name
    assert db.connections.prepared_misses == 0


TRICKY_RESULTS = [None, "null", "", 'a "quoted" \\ back\\slash', "it's", {"a": None},
                  [1, "two", {"x": "}{,"}], "ünïcödé ✓", 1.5, True, {"k": "\\\""}]


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "plain text"])
def test_a_batch_of_completions_stores_every_result_as_it_was(
        client: jobwarden.Client, db: Database, prepared: bool) -> None:
    """The batch's arrays are spelled out as literals by the client: quotes,
    backslashes, braces and a JSON null must arrive unchanged."""
    if not prepared:
        db.connections.prepared_misses = MISSES_BEFORE_PLAIN  # plain text for good
    claims = _claim(client, db, len(TRICKY_RESULTS))
    assert db.jobs.complete_many([
        Completion(id=c.id, claim_token=c.claim_token, result=result, lease_lost=k % 2 == 1)
        for k, (c, result) in enumerate(zip(claims, TRICKY_RESULTS, strict=True))
    ]) == {c.id for c in claims}
    for k, (c, result) in enumerate(zip(claims, TRICKY_RESULTS, strict=True)):
        job = client.job(c.id)
        assert job.status is JobStatus.COMPLETED
        assert job.result == result
        assert job.lease_lost is (k % 2 == 1)


def test_an_outcome_of_a_stale_claim_changes_nothing_through_the_prepared_statements(
        client: jobwarden.Client, db: Database, dsn: str) -> None:
    claims = _claim(client, db, 5)
    stale = [_stale(c) for c in claims]
    first, second, third, fourth, fifth = stale
    for _ in range(2):  # the second round runs from the statements prepared by the first
        assert _complete(db, [first]) == set()
        assert db.jobs.fail(Failure(id=second.id, claim_token=second.claim_token, error="x",
                                    retryable=True, retry_in_seconds=0)) is None
        assert not db.jobs.mark_cancelled(job_id=third.id, claim_token=third.claim_token,
                                          error="x")
        assert not db.jobs.release(job_id=fourth.id, claim_token=fourth.claim_token)
        assert db.jobs.heartbeat_many([(fifth.id, fifth.claim_token)],
                                      grace_seconds=30).alive == frozenset()
    for c in claims:
        job = client.job(c.id)
        assert job.status is JobStatus.PROCESSING and job.attempts == 1
        assert _attempt_rows(dsn, c.id) == []
    assert db.connections.prepared_misses == 0


@pytest.mark.parametrize("size", [1, 2], ids=["job_complete_one", "job_complete_many"])
def test_a_statement_lost_by_a_pooler_runs_as_text_and_records_each_outcome_once(
        dsn: str, size: int) -> None:
    """DEALLOCATE behind the client's back: what a transaction-mode pooler does when
    it hands the next statement to a server connection without the prepared one.
    Each loss: that call runs as plain text; after a few, plain text for good."""
    with Database(dsn, min_size=1, max_size=1) as db:  # one connection: the one we break
        client = jobwarden.Client(database=db)
        rounds = MISSES_BEFORE_PLAIN
        claims = _claim(client, db, (2 * rounds + 2) * size + 1)
        batches = [claims[k * size:(k + 1) * size] for k in range(2 * rounds + 2)]
        stale, last = batches[-2], batches[-1]
        failing = claims[-1]
        for k in range(rounds):
            warm, lost = batches[2 * k], batches[2 * k + 1]
            assert _complete(db, warm) == {c.id for c in warm}  # prepares the statement
            with db.connection() as conn:
                conn.execute("DEALLOCATE ALL")
            assert _complete(db, lost) == {c.id for c in lost}  # runs as text instead
            assert db.connections.prepared_misses == k + 1
        assert _complete(db, last) == {c.id for c in last}  # plain text for good
        assert db.jobs.fail(Failure(id=failing.id, claim_token=failing.claim_token,
                                    error="boom", retryable=False,
                                    retry_in_seconds=0)) is JobStatus.FAILED
        assert _complete(db, [_stale(c) for c in stale]) == set()  # still fenced
        assert _complete(db, batches[1]) == set()  # a second write of the same outcome
        for c in [c for batch in batches[:-2] for c in batch] + last:
            assert client.job(c.id).status is JobStatus.COMPLETED
            assert _attempt_rows(dsn, c.id) == [(1, "completed", "completed")]
        for c in stale:
            assert client.job(c.id).status is JobStatus.PROCESSING
            assert _attempt_rows(dsn, c.id) == []
        assert client.job(failing.id).status is JobStatus.FAILED
        with db.connection() as conn:  # plain text for good: nothing prepared again
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements"
                                ).fetchone() == (0,)


ROWS = 20_000
PROCESSING = 2


def _finished_rows(dsn: str, rows: int, *, processing: int = 0) -> None:
    """``rows`` finished jobs, the first ``processing`` of them still processing, and
    the table's statistics taken."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO jobwarden.jobs (job_class, data, status, claim_token,"
                     " claim_expires_at, claimed_by, finished_at)"
                     " SELECT 'm:noop', jsonb_build_object('i', g), 'completed',"
                     " gen_random_uuid(), NULL, 'h', now() FROM generate_series(1, %s) AS g",
                     (rows,))
        conn.execute("UPDATE jobwarden.jobs SET status = 'processing', finished_at = NULL,"
                     " claim_expires_at = now() + interval '1 hour' WHERE id <= %s",
                     (processing,))
        conn.execute("VACUUM ANALYZE jobwarden.jobs")


@pytest.mark.parametrize("size", [1, 3])
def test_the_server_settles_on_a_generic_plan_for_batches_of_any_size(
        client: jobwarden.Client, db: Database, dsn: str, size: int) -> None:
    """Planning anew on every call is what the prepared statements are there to
    avoid: a batch of one row must not look cheaper to plan for than to reuse
    (on a table large enough that a plan for ten rows costs more than one for one)."""
    _finished_rows(dsn, ROWS)
    calls = 8  # the server tries five custom plans first
    claims = _claim(client, db, calls * size)
    for k in range(calls):
        batch = claims[k * size:(k + 1) * size]
        assert db.jobs.heartbeat_many([(c.id, c.claim_token) for c in batch],
                                      grace_seconds=30).alive == {c.id for c in batch}
        assert _complete(db, batch) == {c.id for c in batch}
    with db.connection() as conn:
        plans = dict((r[0], (r[1], r[2])) for r in conn.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"))
    for name in ("job_complete_one" if size == 1 else "job_complete_many",
                 "job_heartbeat_many"):
        generic, custom = plans[prepared_form(name, db.sql(name))[0]]
        assert generic >= calls - 5 and custom <= 5, (name, generic, custom)


@pytest.mark.parametrize("name", OUTCOME_STATEMENTS)
def test_the_generic_plan_of_an_outcome_statement_looks_jobs_up_by_id(
        db: Database, dsn: str, name: str) -> None:
    """The server switches a prepared statement to a generic plan (parameters
    unknown) after five calls. With statistics taken while few rows were
    processing (the usual case), scanning every processing row through a partial
    index looks cheapest -- for each row of the batch, in a generic plan. The plan
    must look rows up by id instead."""
    values = {"ids": [1, 2], "tokens": [uuid.uuid4(), uuid.uuid4()],
              "results": [None, None], "lease_lost": [False, False], "done_channel": "d",
              "id": 1, "token": uuid.uuid4(), "error": "e", "retryable": True,
              "retry_in": 1.0, "grace": 30.0, "dropped": False, "delay": 0.0,
              "deferral": 0, "result": None}
    if name == "job_complete_one":
        values["lease_lost"] = False
    _finished_rows(dsn, ROWS, processing=PROCESSING)
    with psycopg.connect(dsn, autocommit=True) as conn:
        statement, order, prepare = prepared_form(name, db.sql(name))
        conn.execute(prepare.encode())
        conn.execute("SET plan_cache_mode = force_generic_plan")
        binder = psycopg.ClientCursor(conn)
        explain = binder.mogrify(f"EXPLAIN EXECUTE {statement}"
                                 f"({', '.join('%s' for _ in order)})",
                                 [values[key] for key in order])
        shown = "\n".join(r[0] for r in conn.execute(explain.encode()))
    assert "jobs_pkey" in shown, shown
    assert "Seq Scan on jobs" not in shown, shown
    assert "jobs_claimed_by_idx" not in shown and "jobs_reap_idx" not in shown, shown
