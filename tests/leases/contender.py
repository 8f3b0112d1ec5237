"""One process of the lease fault test: take the lease, record the critical section, repeat.

``python -m tests.leases.contender`` with ``JOBWARDEN_TEST_AUDIT_DSN`` set. Every
interval is written from inside the critical section with the database clock
(``clock_timestamp()``): a row when it starts, its end, then whether the release
found the lease still ours (written with the next section's start, to save a
round trip). The test may SIGKILL or SIGSTOP this process at any
point; a killed holder leaves a row without an end, a stopped one may find its
lease taken over (``released = false``).
"""

from __future__ import annotations

import os
import sys

import psycopg

import jobwarden

NAME = "fault-test"
TTL = 0.5

AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS public.lease_audit (
    id bigserial PRIMARY KEY,
    token bigint NOT NULL,
    pid integer NOT NULL,
    started timestamptz NOT NULL,
    ended timestamptz,
    released boolean
)
"""


def main() -> int:
    dsn = os.environ["JOBWARDEN_TEST_AUDIT_DSN"]
    pid = os.getpid()
    with jobwarden.Client(dsn, max_connections=2) as client, \
            psycopg.connect(dsn, autocommit=True) as audit:
        # The owner names the process, so the test can aim at the current holder;
        # every acquisition still gets its own fencing token.
        guard = client.lease(NAME, ttl=TTL, wait=5, owner=f"pid-{pid}")
        previous: tuple[int, bool] | None = None  # (audit id, release found it ours)
        while True:
            lease = guard.try_acquire()
            if lease is None:
                continue
            # One statement: record the previous release's verdict and start this section.
            row = audit.execute(
                "WITH verdict AS (UPDATE public.lease_audit SET released = %s WHERE id = %s) "
                "INSERT INTO public.lease_audit (token, pid, started) "
                "VALUES (%s, %s, clock_timestamp()) RETURNING id",
                (previous[1] if previous else None, previous[0] if previous else None,
                 lease.token, pid)).fetchone()
            assert row is not None
            audit.execute("UPDATE public.lease_audit SET ended = clock_timestamp() WHERE id = %s",
                          (row[0],))
            previous = (row[0], lease.release())


if __name__ == "__main__":
    sys.exit(main())
