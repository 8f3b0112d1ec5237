"""Rows are read by name: every statement returns the columns its reader names, in order.

``db/jobs.py`` reads a claim as :class:`ClaimColumns`, a job as ``JOB_COLUMNS``
(JobRecord's fields), an attempt as ``ATTEMPT_COLUMNS`` and a reaped job as
``ReapColumns``; ``db/hosts.py`` a host as ``HOST_STATUS_COLUMNS``,
``db/podruns.py`` a running pod run as ``RunningColumns``, ``db/schedules.py`` a
schedule as ``ScheduleColumns``, ``db/runnerpass.py`` a due schedule as
``DueSchedule`` and ``db/leases.py`` a lease as ``LEASE_COLUMNS``: by name,
instead of unpacking or indexing positions. The
statements live in the named-query files, so what binds the two is this: each
statement, run against the real schema, describes exactly those column names.
A column added, dropped, renamed or moved in one statement fails here by name,
not as a wrong value somewhere in a worker.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest

from jobwarden.db.database import Database
from jobwarden.db.hosts import HOST_STATUS_COLUMNS
from jobwarden.db.jobs import ATTEMPT_COLUMNS, JOB_COLUMNS, ClaimColumns, ReapColumns
from jobwarden.db.leases import LEASE_COLUMNS
from jobwarden.db.podruns import RunningColumns
from jobwarden.db.schedules import ScheduleColumns
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.schedules import DueSchedule

#: Every statement whose rows db/jobs.py reads as a claim (the pod-run ones begin so).
CLAIMS = ("job_claim_any", "job_claim_queues", "job_claim_capped_any",
          "job_claim_capped_queues", "job_claims_of_batch")
POD_RUN_CLAIMS = ("pod_run_claim", "pod_run_claims_of_batch", "pod_run_start")
#: Every statement whose rows are read as a JobRecord.
RECORDS = ("job_get", "job_list", "job_running", "job_search", "job_schedule_recent")

#: A value per parameter the statements above take (nothing matches them: the
#: tables are empty, and the transaction is rolled back).
PARAMS: dict[str, Any] = {
    "host": "probe", "limit": 1, "grace": 60.0, "batch": uuid.uuid4(), "queues": ["q"],
    "id": 0, "token": uuid.uuid4(), "lease_token": None, "status": None, "queue": None,
    "name": "schedule", "before": None, "pod_runs": ["JobSchedule/ns/x"],
    "claimant": "probe", "start_deadline": 60.0, "pool": None, "now": None,
    "after_slot": None, "after_name": None, "slot": None, "force": False,
    "channel": "probe", "include_expired": False, "prefix": None,
    "lease_channel": "probe", "jobs_channel": "probe", "done_channel": "probe",
    "wake_channel": "probe", "wake_queues": None, "wake_free": 1, "wake_seconds": 60.0,
}
#: Where a statement's parameter of a shared name has another type.
OVERRIDES: dict[str, dict[str, Any]] = {"lease_clear_holder": {"token": 1}}
#: The other statements read by name, with their reader's names.
OTHERS: dict[str, tuple[str, ...]] = {
    "job_attempt_list": ATTEMPT_COLUMNS,
    "host_status": HOST_STATUS_COLUMNS,
    "pod_run_running": RunningColumns._fields,
    "lease_read": LEASE_COLUMNS,
    "lease_list": LEASE_COLUMNS,
    # The clears: the cleared leases, then how many NOTIFYs went out.
    "lease_clear": (*LEASE_COLUMNS, "n"),
    "lease_clear_holder": (*LEASE_COLUMNS, "n"),
    "job_reap": ReapColumns._fields,
    "schedule_get": ScheduleColumns._fields,
    "schedule_lock": ScheduleColumns._fields,
    "schedule_list": ScheduleColumns._fields,
    # A runner pass's claim: a DueSchedule per row, then the pass's clock.
    "schedule_runner_claim": (*DueSchedule._fields, "at"),
    "schedule_runner_claim_after": (*DueSchedule._fields, "at"),
}


def described(db: Database, dsn: str, name: str) -> list[str]:
    text = db.sql(name)
    wanted = set(re.findall(r"%\((\w+)\)s", text))
    params = {key: OVERRIDES.get(name, {}).get(key, PARAMS.get(key)) for key in wanted}
    with psycopg.connect(dsn) as conn:
        try:
            cur = conn.execute(text, params)
            assert cur.description is not None, name
            return [column.name for column in cur.description]
        finally:
            conn.rollback()


def test_a_job_record_s_columns_are_its_fields_in_order() -> None:
    assert list(JOB_COLUMNS) == [field for field in JobRecord.__dataclass_fields__]


@pytest.mark.parametrize("name", RECORDS)
def test_every_job_statement_returns_the_job_record_s_columns(
        db: Database, dsn: str, name: str) -> None:
    assert described(db, dsn, name) == list(JOB_COLUMNS)


@pytest.mark.parametrize("name", CLAIMS)
def test_every_claim_returns_the_claim_columns(db: Database, dsn: str, name: str) -> None:
    assert described(db, dsn, name) == list(ClaimColumns._fields)


@pytest.mark.parametrize("name", POD_RUN_CLAIMS)
def test_every_pod_run_claim_begins_with_the_claim_columns(
        db: Database, dsn: str, name: str) -> None:
    columns = described(db, dsn, name)
    assert columns[:len(ClaimColumns._fields)] == list(ClaimColumns._fields)
    assert columns[len(ClaimColumns._fields):] == [
        "pod_run", "unique_key", "lease_token", "cancel_requested"]


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_every_other_statement_read_by_name_returns_its_reader_s_columns(
        db: Database, dsn: str, name: str) -> None:
    assert described(db, dsn, name) == list(OTHERS[name])
