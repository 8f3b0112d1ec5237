"""pytest-timeout's alarm held off while pytest builds a test's report.

Why: with the ``signal`` method the alarm covers a test's whole protocol, the
report included. A test that fails close to its timeout on a loaded machine
has its failure formatted (the traceback filtered, each frame's file stat'ed)
when the alarm fires; pytest-timeout then raises ``Failed`` inside the
``pytest_runtest_makereport`` hook, which is an INTERNALERROR: under xdist the
worker's error aborts the whole session ("no tests ran", every other test's
result lost; seen in a fresh-clone CI run at load ~100). So the alarm's
remaining time is taken off for the report and put back after it: the
test's call, setup and teardown stay bounded, and a failure is reported as a
failure.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Generator

import pytest


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport() -> Generator[None, None, None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    remaining, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if remaining > 0:
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)
