"""Bad input through the API: a typed jobwarden error, no payload echoed, nothing stored."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest

import jobwarden
from jobwarden.schedules import ScheduleError
from tests.support import testjobs

SECRET = "card-4111-1111-1111-1111"


def _rows(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM jobwarden.{table}").fetchone()  # noqa: S608
    return int(row[0]) if row else 0


@pytest.mark.parametrize("options", [
    {"data": {"note": "nul \x00 here", "secret": SECRET}},
    {"data": {"key\x00": SECRET}},
    {"data": ["lone \ud800 surrogate", SECRET]},
    {"data": {"secret": SECRET}, "queue": "q\x00"},
    {"data": {"secret": SECRET}, "queue": "\udc80"},
    {"data": {"secret": SECRET}, "queue": "q" * 129},
    {"data": {"secret": SECRET}, "queue": ""},
    {"data": {"secret": SECRET}, "queue": "   "},
    {"data": {"secret": SECRET}, "unique_key": "k\x00"},
    {"data": {"secret": SECRET}, "unique_key": "\ud800"},
    {"data": {"secret": SECRET}, "priority": 2**31},
    {"data": {"secret": SECRET}, "priority": -(2**31) - 1},
])
def test_unstorable_enqueue_input_is_a_typed_error_that_echoes_no_payload(
        client: jobwarden.Client, dsn: str, options: dict[str, Any]) -> None:
    data = options.pop("data")
    with pytest.raises(jobwarden.InvalidInput) as caught:
        client.enqueue(testjobs.Record, data, **options)
    assert SECRET not in str(caught.value)
    assert len(str(caught.value)) < 200
    assert _rows(dsn, "jobs") == 0


def test_the_priority_range_is_the_columns(client: jobwarden.Client) -> None:
    low = client.enqueue(testjobs.Record, priority=-(2**31)).id
    high = client.enqueue(testjobs.Record, priority=2**31 - 1).id
    assert client.job(low).priority == -(2**31) and client.job(high).priority == 2**31 - 1


@pytest.mark.parametrize("name", ["", "   ", "a\x00b", "\ud800", "L" * 10240 + "\x00"])
def test_one_lease_name_rule(client: jobwarden.Client, dsn: str, name: str) -> None:
    with pytest.raises(jobwarden.InvalidInput):
        client.lease(name, ttl=30).acquire()
    assert _rows(dsn, "leases") == 0


def test_a_long_lease_name_is_hashed_as_documented(client: jobwarden.Client) -> None:
    """docs/leases.md "Long names": over 200 characters, the first 135, '#', the sha256."""
    long, sibling = "L" * 10240, "L" * 10239 + "M"
    stored = "L" * 135 + "#" + hashlib.sha256(long.encode()).hexdigest()
    with client.lease(long, ttl=30) as held:
        assert held.name == stored
        assert [(r.name, r.owner is not None) for r in client.db.leases.read(long)] == \
            [(stored, True)]
        with pytest.raises(jobwarden.LeaseBusy):  # the same long name: the same row
            client.lease(long, ttl=30).acquire()
        with client.lease(sibling, ttl=30) as other:  # another long name: another row
            assert other.name != stored and len(other.name) == 200
    assert not any(r.held for r in client.db.leases.read(long))


@pytest.mark.parametrize("options,field", [
    ({"cron": "a" * 10_000}, "cron expression"),
    ({"interval": "9" * 10_000}, "interval"),
    ({"cron": "* * * * *", "timezone": "Europe/" + "x" * 10_000}, "time zone"),
    ({"cron": "* * * * *", "queue": "q" * 10_000}, "queue"),
    ({"cron": "* * * * *\x00"}, "cron expression"),
    ({"cron": "* * * * *", "data": {"x": "\x00"}}, "NUL"),
])
def test_a_long_or_unstorable_schedule_field_is_not_echoed_in_full(
        client: jobwarden.Client, dsn: str, options: dict[str, Any], field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        client.schedules.upsert("nightly", job_class=testjobs.Record, **options)
    assert field in str(caught.value) and len(str(caught.value)) < 300
    assert _rows(dsn, "schedules") == 0


def test_a_blank_queue_is_refused_by_enqueue_as_by_schedules(client: jobwarden.Client) -> None:
    with pytest.raises(jobwarden.InvalidInput):
        client.enqueue(testjobs.Record, queue="")
    with pytest.raises(ScheduleError):
        client.schedules.upsert("nightly", job_class=testjobs.Record, cron="@daily", queue="")
