"""The chart's alert rules, checked and unit-tested by Prometheus' own promtool.

The PrometheusRule is rendered from charts/jobwarden with its default
thresholds (release ``jw`` in namespace ``jobs``, the operator's scrape job and
a runbook base named: what alerts.test.yaml assumes). ``promtool check rules``
parses every expression with Prometheus' parser, and ``promtool test rules``
runs alerts.test.yaml: every alert fires on the series that should fire it and
stays silent on its near misses (``for`` durations, windows forgetting, other
namespaces). tests/chart/test_promtool.py checks every values scenario and the
rare-event alerts' first-event behaviour; this file is the per-alert spec.

promtool comes from Debian's ``prometheus`` package; without it these tests
are skipped with that reason. They need no control plane.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.helmchart import manifests
from tests.support import yamlio

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "alerts" / "alerts.test.yaml"
PROMTOOL = shutil.which("promtool")
#: Every alert on: the operator's scrape job named (JobwardenOperatorDown needs one) and
#: runbook links (alerts.test.yaml expects them under this base).
VALUES = {"prometheusRule": {"enabled": True, "operatorJob": "jw-jobwarden-operator",
                             "runbookBaseUrl": "https://runbooks.example.org/alerts.md"}}

pytestmark = pytest.mark.skipif(PROMTOOL is None,
                                reason="promtool missing (Debian package prometheus)")


def rendered_rules(tmp_path: Path) -> Path:
    rules = [d for d in manifests(VALUES) if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules[0]["spec"]))
    return path


def promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def test_promtool_accepts_every_rule(tmp_path: Path):
    rules = rendered_rules(tmp_path)
    out = promtool("check", "rules", rules.name, cwd=tmp_path)
    count = len(yamlio.load(rules.read_text())["groups"][0]["rules"])
    assert f"SUCCESS: {count} rules found" in out


def test_every_alert_has_a_unit_test(tmp_path: Path):
    rules = yamlio.load(rendered_rules(tmp_path).read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yamlio.load(UNIT_TESTS.read_text())["tests"]
    tested = {t["alertname"] for case in tests for t in case.get("alert_rule_test") or []}
    firing = {t["alertname"] for case in tests for t in case.get("alert_rule_test") or []
              if t.get("exp_alerts")}
    assert alerts == tested == firing


@pytest.mark.slow
def test_every_alert_fires_when_it_should_and_is_silent_otherwise(tmp_path: Path):
    rendered_rules(tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    out = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert "SUCCESS" in out
