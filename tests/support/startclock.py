"""When job code starts: one recorder for a CronJob's pod and a JobSchedule's pod run.

``python -m tests.support.startclock`` is a CronJob container's whole program;
:class:`tests.support.startclockjob.StartClock` is the same code as a job that
``jobwarden run-job`` runs in a pod-per-run pod. Both read the wall clock first
thing, then write it with the pod's name (``$POD_NAME``) into
``public.startclock`` of ``$JOBWARDEN_TEST_AUDIT_DSN``. Only the standard library
is loaded before the clock is read (psycopg after), so neither side's figure
includes the recorder's own imports (bench/cronjob.py compares the two).
"""

from __future__ import annotations

import os
import time

DDL = """
CREATE TABLE IF NOT EXISTS public.startclock (
    kind text NOT NULL,
    pod text,
    job_id bigint,
    at double precision NOT NULL
)
"""


def record(kind: str, at: float, *, job_id: int | None = None) -> None:
    """Store ``at`` (epoch seconds, this host's clock) for this pod."""
    import psycopg

    with psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"], autocommit=True) as conn:
        conn.execute("INSERT INTO public.startclock (kind, pod, job_id, at) "
                     "VALUES (%s, %s, %s, %s)", (kind, os.environ.get("POD_NAME"), job_id, at))


def main() -> None:
    at = time.time()
    record("program", at)


if __name__ == "__main__":
    main()
