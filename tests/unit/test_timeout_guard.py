"""A test failing near its timeout is reported as a failure, not an INTERNALERROR."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]

SLOW_REPORT = """
import time
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # A report that takes longer than what is left of the timeout (a loaded machine
    # formatting a long traceback).
    if call.when == "call":
        time.sleep(1.5)
    yield
"""


def test_an_alarm_due_while_a_failure_is_reported_leaves_a_failure(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(SLOW_REPORT)
    pytester.makepyfile(test_slow="def test_fails():\n    assert False, 'the test failed'\n")
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.timeoutguard", "-o", "timeout=1",
        "-o", "timeout_method=signal")
    result.assert_outcomes(failed=1)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    result.stdout.fnmatch_lines(["*the test failed*"])
