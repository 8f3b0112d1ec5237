"""Dead tuples and autovacuum (issue 16): `jobwarden status` warns, the gauges show it."""

from __future__ import annotations

import json

import psycopg

from jobwarden.db.database import Database
from jobwarden.maintenance import gauges as database_gauges
from jobwarden.observability import metrics
from jobwarden.structs.maintenance import (
    DEAD_TUPLES_MIN,
    HOT_TABLES,
    DatabaseHealth,
    TableHealth,
)
from tests.cli.test_cli import jw
from tests.support.postgres import private_server
from tests.support.waiting import wait_for


def table(name: str = "jobs", *, live: int = 0, dead: int = 0,
          enabled: bool = True) -> TableHealth:
    return TableHealth(table=name, live=live, dead=dead, autovacuum_enabled=enabled,
                       seconds_since_vacuum=None, table_bytes=0, index_bytes=0)


def test_dead_tuples_warn_only_past_both_the_count_and_the_share_of_live_rows() -> None:
    assert not table(dead=DEAD_TUPLES_MIN, live=0).dead_piling_up  # a small table
    assert not table(dead=DEAD_TUPLES_MIN * 2, live=DEAD_TUPLES_MIN * 20).dead_piling_up
    assert table(dead=DEAD_TUPLES_MIN * 2, live=10_000).dead_piling_up
    quiet = DatabaseHealth(autovacuum=True, tables=(table(live=5, dead=5),))
    assert quiet.warnings() == []
    loud = DatabaseHealth(autovacuum=False, tables=(table(dead=2_000_000, live=10_000),
                                                    table("leases", enabled=False)))
    text = "\n".join(loud.warnings())
    assert "autovacuum is off on this server" in text
    assert "autovacuum is off for table leases" in text
    assert "jobs: 2,000,000 dead tuples" in text


def test_health_reads_every_hot_table_and_a_table_with_autovacuum_off(
        db: Database, dsn: str) -> None:
    health = db.maintenance.health()
    assert {t.table for t in health.tables} == set(HOT_TABLES)
    assert all(t.autovacuum_enabled for t in health.tables)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobwarden.jobs SET (autovacuum_enabled = false)")
    jobs = next(t for t in db.maintenance.health().tables if t.table == "jobs")
    assert not jobs.autovacuum_enabled
    assert any("autovacuum is off for table jobs" in w for w in db.maintenance.health().warnings())


def test_status_warns_when_autovacuum_is_off_for_the_jobs_table(dsn: str) -> None:
    assert "warning:" not in jw("status", dsn=dsn).stdout
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobwarden.jobs SET (autovacuum_enabled = false)")
    out = jw("status", dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "warning: autovacuum is off for table jobs" in out.stdout
    shown = json.loads(jw("status", "--json", dsn=dsn).stdout)["database"]
    assert shown["autovacuum"] is True
    assert any("table jobs" in w for w in shown["warnings"])
    jobs = next(t for t in shown["tables"] if t["table"] == "jobs")
    assert jobs["autovacuum_enabled"] is False


def test_status_warns_when_dead_tuples_pile_up_in_the_jobs_table(db: Database,
                                                                  dsn: str) -> None:
    """Real dead tuples: the table's autovacuum off, rows inserted and deleted."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobwarden.jobs SET (autovacuum_enabled = false)")
        conn.execute("INSERT INTO jobwarden.jobs (job_class) "
                     "SELECT 'x:Y' FROM generate_series(1, %s)", (DEAD_TUPLES_MIN + 5_000,))
        conn.execute("DELETE FROM jobwarden.jobs")
        # The statistics reach pg_stat_user_tables when the backend reports them
        # (at the end of its transaction, at most every 500 ms): ask for it now.
        conn.execute("SELECT pg_stat_force_next_flush()")

    def counted() -> bool:
        return next(t for t in db.maintenance.health().tables
                    if t.table == "jobs").dead > DEAD_TUPLES_MIN

    wait_for(counted, timeout=30, message="the dead tuples counted in the statistics")
    text = jw("status", dsn=dsn).stdout
    assert "warning: jobs:" in text and "dead tuples" in text


def test_the_gauge_holder_exports_dead_tuples_and_autovacuum_per_table(
        db: Database, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE jobwarden.leases SET (autovacuum_enabled = false)")
    gauges = database_gauges.DatabaseGauges(db)
    gauges()
    value = metrics.REGISTRY.get_sample_value
    assert value("jobwarden_db_autovacuum_enabled", {"table": "leases"}) == 0.0
    assert value("jobwarden_db_autovacuum_enabled", {"table": "jobs"}) == 1.0
    assert value("jobwarden_db_dead_tuples", {"table": "jobs"}) is not None
    assert (value("jobwarden_db_table_bytes", {"table": "jobs", "kind": "indexes"}) or 0) > 0
    gauges.clear()  # not the holder any more: none of them exported
    assert value("jobwarden_db_dead_tuples", {"table": "jobs"}) is None


def test_status_warns_when_the_servers_autovacuum_is_off() -> None:
    """On a private server: the shared one must not be reconfigured."""
    with private_server() as own:
        with psycopg.connect(own.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET autovacuum = off")
            conn.execute("SELECT pg_reload_conf()")

        def off() -> bool:
            with psycopg.connect(own.dsn) as conn:
                row = conn.execute("SHOW autovacuum").fetchone()
            return row is not None and row[0] == "off"

        wait_for(off, timeout=30, message="the reloaded setting")
        out = jw("status", dsn=own.dsn)
        assert out.returncode == 0, out.stderr
        assert "warning: autovacuum is off on this server" in out.stdout
        assert json.loads(jw("status", "--json", dsn=own.dsn).stdout)["database"][
            "autovacuum"] is False
