"""In CI a test that skips is a failure, unless its skip is one the suite intends.

A skipped test is reported failed; a module skipped whole at collection (a missing
browser, say) is listed at the end and fails the session (a failed collection would
stop the whole run instead).

.ci/run installs and builds everything each tier needs (the Go programs, the image, the
Debian programs: scripts/system-packages, scripts/build-kube-tools, scripts/build-image),
so in CI a skip means that path is broken on a new machine -- as when the image tests
once skipped for want of buildah and nothing in the summary said so. A pytest plugin,
registered by tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

#: The skips that are by design wherever the suite runs, matched in the skip's reason: a
#: chart scenario without that part, the bench extra (peer systems, not a test
#: dependency), the emulator's copies of the scenarios the real control plane runs.
INTENDED_SKIPS = ("renders no PrometheusRule", "is not installed (the bench extra)",
                  "runs on the real control plane here")


def skips_fail_here() -> bool:
    """CI runs .ci/run with ``CI=true``."""
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if _unintended(report):
        report.outcome = "failed"
        report.longrepr = ("skipped in CI, where every tier must run (.ci/run installs what "
                           f"it needs): {report.longrepr}")
    return report


def _unintended(report: pytest.CollectReport | pytest.TestReport) -> bool:
    return (report.skipped and not hasattr(report, "wasxfail") and skips_fail_here()
            and not any(reason in str(report.longrepr) for reason in INTENDED_SKIPS))


#: Modules skipped whole at collection, in CI (the controller sees the workers' too).
_skipped_modules: list[pytest.CollectReport] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _unintended(report):
        _skipped_modules.append(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped_modules:
        terminalreporter.section("skipped in CI, where every tier must run", red=True)
        for report in _skipped_modules:
            terminalreporter.line(f"{report.nodeid}: {report.longrepr}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _skipped_modules and session.exitstatus in (pytest.ExitCode.OK,
                                                   pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
