"""The start clock (tests/support/startclock.py) as a job, for ``jobwarden run-job``."""

from __future__ import annotations

import time
from typing import Any

import jobwarden
from tests.support import startclock


class StartClock(jobwarden.Job):
    """Records when its code started, then returns."""

    def perform(self, data: Any) -> None:
        at = time.time()
        startclock.record("run-job", at, job_id=self.job_id)
