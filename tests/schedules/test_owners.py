"""A schedule whose owner is gone stops firing (migration 0022, docs/schedules.md).

Rows written by a cluster's operator (``source = kubernetes:<cluster>``) fire while
that operator's confirmation (``schedule_owners``) is within its grace; once it has
lapsed, every 0.2.0 runner holds them (``owner_held_at``; read as suspended by
``owner-absent``) instead of enqueuing. A row no confirmation covers (written by
0.1.0's operator) fires as before. The returning operator (or
another cluster's with the same spec) lifts the hold, and the catch-up rule decides
the slots that passed. The heartbeat's age is moved in SQL here, never waited for.
"""

from __future__ import annotations

from jobwarden.api.client import Client
from jobwarden.db.database import Database
from jobwarden.schedules import runner
from jobwarden.structs.schedules import OWNER_ABSENT

JOB = "tests.support.schedulejobs:Tick"
SOURCE = "kubernetes:east"


def store(client: Client, name: str, *, source: str = SOURCE) -> None:
    client.schedules.upsert(name, interval="1m", job_class=JOB, source=source)


def jobs_of(client: Client, name: str) -> int:
    return sum(1 for j in client.jobs(limit=10_000) if j.schedule_name == name)


def age_owner(db: Database, *, source: str = SOURCE, seconds: int) -> None:
    """The owner's last confirmation ``seconds`` ago (as if its operator had stopped)."""
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedule_owners SET renewed_at = now() - "
                     "%s * interval '1 second' WHERE source = %s", (seconds, source))
        conn.commit()


def make_due(db: Database, name: str) -> None:
    """The schedule's next slot has come (its planning point a minute back)."""
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedules SET next_slot = now() - interval '1 minute', "
                     "planned_until = now() - interval '90 seconds' WHERE name = %s", (name,))
        conn.commit()


def held_by_absent_owner(db: Database, client: Client, name: str, *, holder: str,
                         absent_for: int) -> None:
    """``name`` stored by SOURCE's operator, which confirmed it (grace 30 s) and then
    stopped ``absent_for`` seconds ago; its slot came and a runner held it."""
    store(client, name)
    client.schedules.confirm_owner(source=SOURCE, namespaces=[""], holder=holder,
                                   grace_seconds=30)
    age_owner(db, seconds=absent_for)
    make_due(db, name)
    assert runner.enqueue_due(db).enqueued == 0
    row = client.schedules.get(name)
    assert row is not None and row.suspended_by == OWNER_ABSENT


def test_a_schedule_fires_while_its_owner_confirms_and_is_held_once_it_stops(
        db: Database, client: Client) -> None:
    store(client, "app1/ping")
    client.schedules.confirm_owner(source=SOURCE, namespaces=[""], holder="op-1",
                                   grace_seconds=60)
    make_due(db, "app1/ping")
    assert runner.enqueue_due(db).enqueued == 1
    assert jobs_of(client, "app1/ping") == 1

    age_owner(db, seconds=61)  # the operator stopped confirming a grace ago
    make_due(db, "app1/ping")
    report = runner.enqueue_due(db)
    assert (report.checked, report.enqueued, report.errors) == (1, 0, 0)
    row = client.schedules.get("app1/ping")
    assert row is not None and row.suspended and row.suspended_by == OWNER_ABSENT
    assert jobs_of(client, "app1/ping") == 1
    # Held: not due any more for a runner (nor in the worker's "anything due?" check).
    assert runner.enqueue_due(db).checked == 0
    [owner] = client.schedules.owners()
    assert (owner.source, owner.namespace, owner.holder, owner.fresh) == (
        SOURCE, "", "op-1", False)


def test_the_returning_owner_resumes_with_catch_up_and_others_stay_held(
        db: Database, client: Client) -> None:
    held_by_absent_owner(db, client, "app1/ping", holder="op-1", absent_for=600)
    assert client.schedules.resume_owned("app1/ping", source=SOURCE)
    assert not client.schedules.resume_owned("app1/ping", source=SOURCE)  # nothing to lift
    client.schedules.confirm_owner(source=SOURCE, namespaces=[""], holder="op-2",
                                   grace_seconds=60)
    report = runner.enqueue_due(db)
    # Catch-up `latest`: the newest slot that passed while held runs, within its window.
    assert (report.checked, report.enqueued) == (1, 1)
    row = client.schedules.get("app1/ping")
    assert row is not None and not row.suspended and row.source == SOURCE


def test_only_rows_an_absent_owner_covers_are_held(db: Database, client: Client) -> None:
    # East's operator watched app1 and app2 once, now only app1; west watches all.
    for name, source in (("app1/a", SOURCE), ("app2/b", SOURCE), ("app1/w", "kubernetes:west"),
                         ("app3/legacy", "kubernetes:old"), ("nightly", "code"),
                         ("cli-made", "cli")):
        store(client, name, source=source)
        make_due(db, name)
    client.schedules.confirm_owner(source=SOURCE, namespaces=["app1", "app2"], holder="op",
                                   grace_seconds=30)
    age_owner(db, seconds=31)
    client.schedules.confirm_owner(source=SOURCE, namespaces=["app1"], holder="op",
                                   grace_seconds=30)
    client.schedules.confirm_owner(source="kubernetes:west", namespaces=[""], holder="w",
                                   grace_seconds=30)
    report = runner.enqueue_due(db)
    assert report.enqueued == 5
    held = {r.name for r in client.schedules.list() if r.suspended_by == OWNER_ABSENT}
    # app3/legacy: no confirmation covers it (a 0.1.0 operator's row): it fires.
    assert held == {"app2/b"}


def test_another_cluster_with_the_same_spec_adopts_a_held_row(
        db: Database, client: Client) -> None:
    held_by_absent_owner(db, client, "shared/report", holder="east", absent_for=31)
    assert client.schedules.resume_owned("shared/report", source="kubernetes:west")
    row = client.schedules.get("shared/report")
    assert row is not None and not row.suspended and row.source == "kubernetes:west"
    assert runner.enqueue_due(db).enqueued == 1  # no west confirmation yet: not covered
