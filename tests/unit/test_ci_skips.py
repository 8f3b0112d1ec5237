"""CI fails a skipped tier: the plugin run by itself on a test file that skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest

def test_a_tier_whose_tool_is_missing():
    pytest.skip("no frobnicator (apt-get install frobnicator)")

def test_a_scenario_without_that_part():
    pytest.skip("minimal renders no PrometheusRule")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

def test_that_runs():
    pass
'''


MODULE_SKIPPED = '''
import pytest

pytest.skip("no browser here", allow_module_level=True)
'''


def run_probe(tmp_path: Path, ci: str | None, probe: str = PROBE, *options: str
              ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(probe)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.ci_skips", "-p", "no:cacheprovider",
         "-q", "-rA", "--rootdir", str(tmp_path), "-c", os.devnull, *options, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False)


def test_in_ci_a_skip_fails_unless_it_is_an_intended_one(tmp_path: Path) -> None:
    result = run_probe(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed" in result.stdout, result.stdout
    assert "skipped in CI, where every tier must run" in result.stdout
    assert "no frobnicator" in result.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_elsewhere_a_skip_is_a_skip(tmp_path: Path, ci: str | None) -> None:
    result = run_probe(tmp_path, ci)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in result.stdout, result.stdout


@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["alone", "xdist"])
def test_in_ci_a_module_skipped_at_collection_fails_the_session(
        tmp_path: Path, options: tuple[str, ...]) -> None:
    # Under xdist the workers collect; the controller must still see the skip.
    result = run_probe(tmp_path, "true", MODULE_SKIPPED, *options)
    assert result.returncode == 1, result.stdout
    assert "skipped in CI, where every tier must run" in result.stdout
    assert "no browser here" in result.stdout
    assert run_probe(tmp_path, None, MODULE_SKIPPED).returncode == 5  # nothing ran: not CI
