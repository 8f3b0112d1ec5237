"""Jobs for the silent-database tests: their effects go to the audit table directly.

``Nap`` sleeps without ``Job.heartbeat()``: what it records (start, end) reaches
the database over a connection of its own (``JOBWARDEN_TEST_AUDIT_DSN``, not
through the relay), so a job in flight finishes while the worker's own
connections are silent, and "ran once" is counted in rows.
"""

from __future__ import annotations

import time
from typing import Any

import jobwarden
from tests.support.testjobs import audit


class Nap(jobwarden.Job):
    timeout = 300

    def perform(self, data: Any) -> str:
        audit(self, "start")
        time.sleep(float(data.get("seconds", 0)))
        audit(self, "end")
        return "napped"
