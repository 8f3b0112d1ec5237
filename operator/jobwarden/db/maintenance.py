"""Database upkeep (maintenance.sql): retention deletes and the hot tables' health.

Only SQL lives here; which rules apply and when a pass runs is decided by
:mod:`jobwarden.maintenance.retention`, and what counts as a problem by
:mod:`jobwarden.structs.maintenance`.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, cast

from jobwarden.structs.maintenance import HOT_TABLES, DatabaseHealth, TableHealth
from jobwarden.structs.states import JobStatus

if TYPE_CHECKING:
    from jobwarden.db.database import Database


class MaintenanceTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def retention_bound(self, status: JobStatus, *, max_age: float | None,
                        max_rows: int | None) -> datetime.datetime | None:
        """The newest ``finished_at`` the rule deletes for ``status`` (None: nothing)."""
        found = self._db.row("retention_bound", {
            "status": status.value, "older_than": max_age, "keep": max_rows})
        return None if found is None else cast("datetime.datetime | None", found[0])

    def retention_delete(self, status: JobStatus, *, through: datetime.datetime,
                         batch: int) -> int:
        """Delete one batch of ``status`` rows finished at or before ``through``."""
        return self._db.execute("retention_delete", {
            "status": status.value, "through": through, "batch": batch})

    def health(self, tables: tuple[str, ...] = HOT_TABLES) -> DatabaseHealth:
        """The server's autovacuum switch and each hot table's dead tuples and vacuums."""
        setting = self._db.row("db_autovacuum_setting")
        rows = self._db.rows("db_table_health", {"schema": self._db.schema,
                                                 "tables": list(tables)})
        return DatabaseHealth(
            autovacuum=bool(setting[0]) if setting is not None else True,
            tables=tuple(
                TableHealth(table=str(name), live=int(live), dead=int(dead),
                            autovacuum_enabled=bool(enabled),
                            seconds_since_vacuum=None if since is None else float(since),
                            table_bytes=int(table_bytes), index_bytes=int(index_bytes))
                for name, live, dead, enabled, since, table_bytes, index_bytes in rows))
