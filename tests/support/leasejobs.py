"""Exclusive and keyed jobs the lease tests run (in-process or with ``--app``).

They look at the leases table from inside ``perform`` (through their own
connection, DSN from ``JOBWARDEN_TEST_AUDIT_DSN``) and record what they saw in
``public.audit``, so a test can prove the lease was held *during* the run.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import jobwarden
from tests.support.testjobs import audit


def _conn() -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"], autocommit=True)


def lease_row(name: str) -> tuple[Any, ...] | None:
    """(owner, token, expires_at) of slot 0 of ``name``, as the database has it now."""
    with _conn() as conn:
        return conn.execute(
            "SELECT owner, token, expires_at FROM jobwarden.leases WHERE name = %s AND slot = 0",
            (name,)).fetchone()


class ExclusiveRecord(jobwarden.Job):
    """One run at a time cluster-wide; records the lease owner and token it saw."""

    exclusive = True
    timeout = 30

    def perform(self, data: Any) -> Any:
        row = lease_row(f"job:{type(self).path()}")
        audit(self, "ran", f"{row[0]}|{row[1]}" if row else "no lease")
        return data


class Keyed(jobwarden.Job):
    """Both a static key and the method: the method must win."""

    exclusive = True
    concurrency_key = "static"
    timeout = 30

    def concurrency_key_for(self, data: Any) -> str | None:
        return data.get("key") if isinstance(data, dict) else None

    def perform(self, data: Any) -> Any:
        audit(self, "ran", str(data))
        return data


class StaticKey(jobwarden.Job):
    concurrency_key = "static-key"
    timeout = 30

    def perform(self, data: Any) -> Any:
        audit(self, "ran")
        return data


class BusyOnce(jobwarden.Job):
    """A key that tests hold elsewhere; one retry allowed, which a busy key must not use."""

    concurrency_key = "busy-key"
    max_retries = 1
    timeout = 10

    def perform(self, data: Any) -> Any:
        audit(self, "ran")
        return "ran"


class SkipWhenBusy(BusyOnce):
    on_busy = "skip"


class FailWhenBusy(BusyOnce):
    on_busy = "fail"
    backoff_base = 0.01


class TakenOver(jobwarden.Job):
    """Lets its lease lapse mid-run and has a 'thief' take it over, then finishes."""

    concurrency_key = "stolen"
    timeout = 30

    def perform(self, data: Any) -> str:
        # Lapse and takeover in one transaction: as two autocommit statements the
        # worker's lease renewal could run between them (on a loaded machine it did),
        # renew the lapsed lease legitimately, and leave nothing to steal.
        with _conn() as conn, conn.transaction():
            conn.execute("UPDATE jobwarden.leases SET expires_at = now() - interval '1 second' "
                         "WHERE name = 'key:stolen'")
            taken = conn.execute(
                "UPDATE jobwarden.leases SET owner = 'thief', "
                "token = nextval('jobwarden.lease_tokens'), expires_at = now() + interval '1 min' "
                "WHERE name = 'key:stolen' AND expires_at <= now() RETURNING token").fetchone()
        audit(self, "stolen", str(taken[0]) if taken else "not stolen")
        return "finished anyway"


class SlowExclusive(jobwarden.Job):
    """Runs ``seconds`` without calling heartbeat(): only the worker's batch heartbeat renews."""

    exclusive = True
    timeout = 30

    def perform(self, data: Any) -> None:
        audit(self, "start")
        time.sleep(float(data["seconds"]))
        audit(self, "end")


class HeartbeatingExclusive(jobwarden.Job):
    """Records its lease expiry, heartbeats after a pause, records it again."""

    exclusive = True
    timeout = 30

    def perform(self, data: Any) -> None:
        name = f"job:{type(self).path()}"
        before = lease_row(name)
        time.sleep(float(data.get("pause", 1.2)))
        self.heartbeat()
        after = lease_row(name)
        assert before is not None and after is not None
        audit(self, "expiry", f"{before[2].isoformat()}|{after[2].isoformat()}")
