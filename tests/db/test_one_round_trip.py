"""``Database.in_one_round_trip``: statements sent together still form one transaction."""

from __future__ import annotations

import psycopg
import pytest

import jobwarden
from jobwarden.db.database import Database
from tests.support import testjobs


def test_pipelined_statements_return_each_ones_rows_in_order(db: Database) -> None:
    found = db.in_one_round_trip([("db_now", None), ("job_stats", None), ("db_now", None)])
    assert len(found) == 3
    assert found[0][0][0] == found[2][0][0]  # one transaction: one now()
    assert found[1] == []


def test_a_failing_statement_rolls_back_the_ones_before_it(
        client: jobwarden.Client, db: Database) -> None:
    """The capped claim relies on this: its lock and its claim commit together or not
    at all."""
    job = client.enqueue(testjobs.Noop).id
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        db.in_one_round_trip([("job_cancel", {"id": job, "done_channel": "jobwarden_done"}),
                      ("job_get", {"id": "not a number"})])
    assert client.job(job).status is jobwarden.JobStatus.PENDING
