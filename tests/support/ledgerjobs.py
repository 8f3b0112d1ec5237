"""Jobs whose only effect is a ledger row, committed with their own completion."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import psycopg

import jobwarden

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS public.ledger (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    n integer NOT NULL
)
"""


def book(job: jobwarden.Job, data: Any) -> None:
    """Insert one ledger row and complete the job, in one transaction."""
    with psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"]) as conn, conn.transaction():
        conn.execute("INSERT INTO public.ledger (job_id, attempt, n) VALUES (%s, %s, %s)",
                     (job.job_id, job.attempt, data["n"]))
        pause = float(data.get("pause", 0))
        if pause:
            time.sleep(random.uniform(0, pause))  # widen the window a SIGKILL can hit
        job.complete_in_transaction(conn, {"booked": data["n"]})


class Book(jobwarden.Job):
    """Idempotent by declaration; not idempotent in effect (no unique ledger key)."""

    def perform(self, data: Any) -> str:
        book(self, data)
        return "not stored: the transaction stored the result"


class BookOnce(jobwarden.Job):
    """Not idempotent, but transactional: a crash before the commit left nothing."""

    idempotent = False
    transactional = True

    def perform(self, data: Any) -> None:
        book(self, data)
