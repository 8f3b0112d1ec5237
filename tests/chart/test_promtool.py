"""The rendered alert rules, checked and unit-tested by Prometheus's own promtool.

``promtool check rules`` is Prometheus's parser and validator (the
promql-parser checks in test_monitoring.py are a second opinion);
``promtool test rules`` evaluates the rules over synthetic series with the
real engine, which is how the "first event after a process start" questions
are answered without waiting minutes: a counter exported at 0 and bumped once,
a counter born at 1, an old counter that stays flat. Skips with one line when
promtool is not installed (Debian: apt-get install prometheus).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helmchart import manifests, scenarios, values_of

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="no promtool (apt-get install prometheus)")


def _groups(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    rules = [d for d in manifests(values) if d["kind"] == "PrometheusRule"]
    return [g for rule in rules for g in rule["spec"]["groups"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("scenario", scenarios())
def test_promtool_accepts_the_rendered_rules(scenario: str, tmp_path: Path) -> None:
    groups = _groups(values_of(scenario))
    if not groups:
        pytest.skip(f"{scenario} renders no PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def _alert(name: str, at: str, fired: list[dict[str, str]]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": labels} for labels in fired]}


CASES: list[dict[str, Any]] = [
    {   # primed at 0, one loss at minute 20: fires at once, resolves after the 15m window
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_lease_lost_total{kind="key",pod="w-1"}',
             "values": "0x19 1x30"},
            {"series": 'jobwarden_lease_lost_total{kind="lock",pod="w-1"}', "values": "0x50"},
        ],
        "alert_rule_test": [
            _alert("JobwardenLeaseLost", "19m", []),
            _alert("JobwardenLeaseLost", "21m", [{"kind": "key"}]),
            _alert("JobwardenLeaseLost", "45m", []),
        ],
    },
    {   # born at 1 in a process that started at minute 9: no increase(), still fires
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_lease_lost_total{kind="schedule",pod="op-2"}',
             "values": "_x9 1x40"},
        ],
        "alert_rule_test": [
            _alert("JobwardenLeaseLost", "8m", []),
            _alert("JobwardenLeaseLost", "11m", [{"kind": "schedule"}]),
            _alert("JobwardenLeaseLost", "40m", []),
        ],
    },
    {   # an operator reaps a job of a class it never saw: born at 1
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_jobs_reaped_total{queue="q",job_class="m:C",'
                       'outcome="interrupted",pod="op"}', "values": "_x4 1x30"},
            {"series": 'jobwarden_jobs_reaped_total{queue="q",job_class="m:C",'
                       'outcome="retried",pod="op"}', "values": "_x4 0x30"},
        ],
        "alert_rule_test": [
            _alert("JobwardenJobsReaped", "6m",
                   [{"queue": "q", "job_class": "m:C", "outcome": "interrupted",
                     "severity": "warning", "team": "platform"}]),
            _alert("JobwardenJobsReaped", "30m", []),
        ],
    },
    {   # a class's failures in a worker that started at minute 5: the series is born at 1
        # (rate() saw 2 failures of 3 and never fired); 3 failures, none completed: fires
        # once failing for 10m (the rule's "for"), silent before, resolved after the window
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_jobs_failed_total{queue="q",job_class="m:F",'
                       'reason="error",pod="w-2"}', "values": "_x5 1 2 3x60"},
            # another class, as many failures but among 10 completions a minute: silent
            {"series": 'jobwarden_jobs_failed_total{queue="q",job_class="m:G",'
                       'reason="error",pod="w-2"}', "values": "_x5 1 2 3x60"},
            {"series": 'jobwarden_jobs_completed_total{queue="q",job_class="m:G",pod="w-2"}',
             "values": "0+10x70"},
        ],
        "alert_rule_test": [
            _alert("JobwardenJobsFailing", "6m", []),
            _alert("JobwardenJobsFailing", "16m", []),
            _alert("JobwardenJobsFailing", "18m", [{"queue": "q", "job_class": "m:F"}]),
            _alert("JobwardenJobsFailing", "40m", []),
        ],
    },
    {   # missed slots counted by the first runner pass after a downtime (born at 3)
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_schedule_slots_missed_total{schedule="nightly",pod="w"}',
             "values": "_x2 3x120"},
        ],
        "alert_rule_test": [
            _alert("JobwardenScheduleSlotsMissed", "5m",
                   [{"schedule": "nightly", "severity": "warning", "team": "platform"}]),
            _alert("JobwardenScheduleSlotsMissed", "100m", []),
        ],
    },
]


CASES += [
    {   # autovacuum turned off for the jobs table at minute 11: fires after `for` (15m)
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_db_autovacuum_enabled{table="jobs",pod="op"}',
             "values": "1x10 0x30"},
            {"series": 'jobwarden_db_autovacuum_enabled{table="leases",pod="op"}',
             "values": "1x40"},
        ],
        "alert_rule_test": [
            _alert("JobwardenAutovacuumOff", "20m", []),
            _alert("JobwardenAutovacuumOff", "30m", [{"table": "jobs"}]),
        ],
    },
    {   # 500k dead beside 10k live in jobs: fires after `for` (30m); a big table with
        # dead tuples below 20% of its live rows and a small one below 100k never do
        "interval": "1m",
        "input_series": [
            {"series": 'jobwarden_db_dead_tuples{table="jobs",pod="op"}',
             "values": "0x5 500000x60"},
            {"series": 'jobwarden_db_live_tuples{table="jobs",pod="op"}', "values": "10000x65"},
            {"series": 'jobwarden_db_dead_tuples{table="job_attempts",pod="op"}',
             "values": "150000x65"},
            {"series": 'jobwarden_db_live_tuples{table="job_attempts",pod="op"}',
             "values": "10000000x65"},
            {"series": 'jobwarden_db_dead_tuples{table="leases",pod="op"}', "values": "50000x65"},
            {"series": 'jobwarden_db_live_tuples{table="leases",pod="op"}', "values": "10x65"},
        ],
        "alert_rule_test": [
            _alert("JobwardenDeadTuplesPilingUp", "20m", []),
            _alert("JobwardenDeadTuplesPilingUp", "40m", [{"table": "jobs"}]),
        ],
    },
]


def test_rare_event_alerts_fire_on_the_first_event_and_resolve(tmp_path: Path) -> None:
    groups = _groups(values_of("full-values.yaml"))
    for group in groups:  # promtool compares annotations too; these tests are about firing
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    for case in CASES:
        for test in case["alert_rule_test"]:
            for expected in test["exp_alerts"]:
                labels = expected["exp_labels"]
                labels.setdefault("severity", "warning")
                labels.setdefault("team", "platform")
                labels.pop("pod", None)
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                                     "tests": CASES}))
    result = _promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
