"""The hot tables carry their own autovacuum settings (migration 0009, issue 16)."""

from __future__ import annotations

import psycopg


def _options(dsn: str, table: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
                           (f"jobwarden.{table}",)).fetchone()
    assert row is not None
    return dict(option.split("=", 1) for option in row[0] or [])


def test_the_jobs_table_is_vacuumed_after_one_percent_of_it_is_dead(dsn: str) -> None:
    options = _options(dsn, "jobs")
    assert options["autovacuum_vacuum_scale_factor"] == "0.01"
    assert options["autovacuum_vacuum_threshold"] == "1000"
    assert options["autovacuum_analyze_scale_factor"] == "0.02"


def test_small_hot_tables_are_vacuumed_after_a_fixed_number_of_dead_rows(dsn: str) -> None:
    for table in ("leases", "hosts", "workers"):
        options = _options(dsn, table)
        assert options["autovacuum_vacuum_scale_factor"] == "0", table
        assert int(options["autovacuum_vacuum_threshold"]) <= 500, table
