"""Migration 0017 on a database whose schedules are in flight: no slot lost or doubled.

0017 adds ``schedules.slot_rows`` (the history's row count the runner prunes by)
counted from the history that exists, and gives ``schedules`` room for its
updates (fillfactor). A runner of the previous version may hold schedule rows in
an open pass while the migration runs; its history rows must be in the count,
and the first pass of the new runner must enqueue each due slot once.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from jobwarden.api.client import Client
from jobwarden.db import migrations, queries
from jobwarden.db.database import Database
from jobwarden.schedules import runner
from tests.support.waiting import wait_for

SCHEMA = "upgrading"
T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
JOB = "tests.support.schedulejobs:Tick"


def _migrate_upto(dsn: str, version: int) -> None:
    """The schema as a database of the previous release has it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(migrations._bootstrap(SCHEMA))
        for migration in migrations.available():
            if migration.version > version:
                break
            with conn.transaction():
                conn.execute(queries.render(migration.sql, SCHEMA))
                conn.execute(f"INSERT INTO {SCHEMA}.schema_migrations (version, name) "  # noqa: S608
                             "VALUES (%s, %s)", (migration.version, migration.name))


@pytest.fixture
def old_db(dsn: str) -> Iterator[Database]:
    _migrate_upto(dsn, 16)
    database = Database(dsn, schema=SCHEMA, min_size=1, max_size=4)
    yield database
    database.close()


def _history(conn: psycopg.Connection, name: str, slots: list[dt.datetime]) -> None:
    """History rows as the previous runner's pass wrote them."""
    conn.execute(f"INSERT INTO {SCHEMA}.schedule_slots (schedule_name, slot, fate) "  # noqa: S608
                 "SELECT %s, s, 'missed' FROM unnest(%s::timestamptz[]) AS s", (name, slots))


def _schedules_as_the_previous_release_wrote_them(dsn: str, names: list[str]) -> None:
    """Today's upsert writes the rows in a scratch schema at today's level (its statements
    read columns the old schema lacks); the old schema takes the columns it has."""
    with Database(dsn, schema="scratch", min_size=1, max_size=1) as scratch:
        scratch.migrate()
        for name in names:
            Client(database=scratch).schedules.upsert(name, interval="1m", job_class=JOB,
                                                      now=T0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = sql.SQL(", ").join(sql.Identifier(name) for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'schedules'", (SCHEMA,)))
        conn.execute(sql.SQL("INSERT INTO {}.schedules ({}) SELECT {} FROM scratch.schedules")
                     .format(sql.Identifier(SCHEMA), columns, columns))


def test_the_upgrade_counts_the_history_of_a_pass_in_flight_and_loses_no_slot(
        old_db: Database, dsn: str) -> None:
    client = Client(database=old_db)
    _schedules_as_the_previous_release_wrote_them(dsn, ["full", "some", "none"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        _history(conn, "full", [T0 - dt.timedelta(minutes=n) for n in range(1, 50)])
        _history(conn, "some", [T0 - dt.timedelta(minutes=n) for n in range(1, 4)])
    # A pass of the previous runner holds "full" and adds a slot's fate meanwhile.
    in_flight = psycopg.connect(dsn)
    in_flight.execute(f"SELECT 1 FROM {SCHEMA}.schedules WHERE name = 'full' "  # noqa: S608
                      "FOR UPDATE")
    _history(in_flight, "full", [T0])
    done = threading.Event()
    upgrade = threading.Thread(target=lambda: (old_db.migrate(), done.set()))
    upgrade.start()
    with psycopg.connect(dsn, autocommit=True) as watcher:
        wait_for(lambda: watcher.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone() != (0,),
            timeout=30, message="the migration waits for the pass's lock")
    assert not done.is_set()
    in_flight.commit()
    in_flight.close()
    upgrade.join(timeout=60)
    assert done.is_set()
    with psycopg.connect(dsn) as conn:
        counted = dict(conn.execute(f"SELECT name, slot_rows FROM {SCHEMA}.schedules"  # noqa: S608
                                    ).fetchall())
    assert counted == {"full": 50, "some": 3, "none": 0}

    report = client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=3, seconds=1))
    assert report.enqueued == 3 and report.duplicates == 0 and report.errors == 0
    keys = sorted(j.unique_key or "" for j in client.jobs(limit=100))
    assert keys == [f"{name}:2030-01-07T12:03:00Z" for name in ("full", "none", "some")]
    for name in ("full", "some", "none"):
        record = client.schedules.get(name)
        assert record is not None and record.enqueued_count == 1
        assert record.missed_count == 2  # 12:01 and 12:02 (catch-up latest)
        assert record.next_slot == T0 + dt.timedelta(minutes=3, seconds=30)
        shown = client.db.schedules.slots(name, limit=1000)
        assert shown[0].fate == "enqueued" and len(shown) <= runner.SLOT_HISTORY
    again = client.schedules.enqueue_due(now=T0 + dt.timedelta(minutes=3, seconds=2))
    assert again.checked == 0
