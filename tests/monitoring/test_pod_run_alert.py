"""JobwardenPodRunsNotStarting, evaluated by Prometheus's own rule engine (promtool).

The operator exports ``jobwarden_pod_run_failures_total{kind, cause}`` at 0 for
every cause from its start (metrics.prime_pod_runs), so the first pod that does
not start by its deadline is an increase the alert sees; a pod that started and
then died (OOM, killed) is not this alert's business.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helmchart import manifests, values_of

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="no promtool (apt-get install prometheus)")
ALERT = "JobwardenPodRunsNotStarting"


def rules() -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    (rule,) = [d for d in manifests(values_of("full-values.yaml"))
               if d["kind"] == "PrometheusRule"]
    groups = list(rule["spec"]["groups"])
    for group in groups:
        group["rules"] = [r for r in group["rules"] if r.get("alert") == ALERT]
    assert any(group["rules"] for group in groups), f"{ALERT} not rendered"
    return groups


def fired(at: str, *labels: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": ALERT, "exp_alerts": [
        {"exp_labels": {"severity": "warning", "team": "platform", **found},
         "exp_annotations": {}} for found in labels]}


def series(kind: str, cause: str, values: str) -> dict[str, str]:
    return {"series": f'jobwarden_pod_run_failures_total{{kind="{kind}",cause="{cause}",'
                      'pod="jobwarden-operator-0"}', "values": values}


def test_the_first_pod_that_never_starts_fires_and_a_pod_that_died_does_not(
        tmp_path: Path) -> None:
    groups = rules()
    for group in groups:  # annotations are checked in tests/chart; here: firing
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    case = {
        "interval": "1m",
        "input_series": [
            series("JobSchedule", "image_pull", "0x19 1x40"),
            series("JobSchedule", "unschedulable", "0x60"),
            series("JobSchedule", "oom_killed", "0x9 1x50"),
            series("ExclusiveJob", "start_deadline", "0x29 1 2x30"),
        ],
        "alert_rule_test": [
            fired("10m"),
            fired("21m", {"kind": "JobSchedule", "cause": "image_pull"}),
            fired("31m", {"kind": "JobSchedule", "cause": "image_pull"},
                  {"kind": "ExclusiveJob", "cause": "start_deadline"}),
            fired("55m"),
        ],
    }
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(path)], "evaluation_interval": "1m",
                                     "tests": [case]}))
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
