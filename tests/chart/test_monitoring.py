"""The Grafana dashboard and the alert rules use real PromQL and only the
metrics (and labels) that operator/jobwarden/observability/metrics.py documents."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helmchart import CHART, ROOT, manifests, values_of
from metricnames import check, documented, substitute_grafana_variables

from tests.support import yamlio

pytest.importorskip("promql_parser", reason="pip install promql-parser (parses PromQL)")

CATALOG = documented()
DASHBOARD = json.loads((CHART / "dashboards" / "jobwarden.json").read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    queries = []
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            queries.append((f"{panel['title']} {target['refId']}", target["expr"]))
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["definition"])
            assert match, variable["definition"]
            queries.append((f"variable {variable['name']}", match.group(1)))
    return queries


def alert_rules() -> list[dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    docs = manifests(values_of("full-values.yaml"))
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_the_docstring_catalog_matches_the_metrics_module() -> None:
    pytest.importorskip("prometheus_client")
    import sys

    sys.path.insert(0, str(ROOT / "operator"))
    from jobwarden.observability import metrics
    registered = {}
    for family in metrics.REGISTRY.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        registered[name] = family.type
    assert {n: m.type for n, m in CATALOG.metrics.items()} == registered


def test_dashboard_has_the_cluster_namespace_pool_and_queue_variables() -> None:
    names = [v["name"] for v in DASHBOARD["templating"]["list"]]
    assert names == ["datasource", "cluster", "namespace", "pool", "queue"]


def test_every_dashboard_panel_reads_the_selected_data_source() -> None:
    for panel in DASHBOARD["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def test_dashboard_covers_what_on_call_needs() -> None:
    used = " ".join(expr for _, expr in dashboard_queries())
    for metric in (
        "jobwarden_jobs_completed_total",
        "jobwarden_jobs_failed_total",
        "jobwarden_jobs_retried_total",
        "jobwarden_queue_depth",
        "jobwarden_job_queue_wait_seconds_bucket",
        "jobwarden_jobs_running",
        "jobwarden_lease_lost_total",
        "jobwarden_jobs_deferred_total",
        "jobwarden_jobs_skipped_total",
        "jobwarden_lease_busy_total",
        "jobwarden_schedule_slots_enqueued_total",
        "jobwarden_schedule_slots_missed_total",
        "jobwarden_schedule_slots_skipped_total",
        "jobwarden_schedule_seconds_since_success",
        "jobwarden_jobs_reaped_total",
        "jobwarden_jobs_fenced_total",
        "jobwarden_host_draining",
        "jobwarden_rollout_duration_seconds_bucket",
        "jobwarden_drain_duration_seconds_bucket",
    ):
        assert metric in used, metric


@pytest.mark.parametrize(("where", "expr"), dashboard_queries(), ids=lambda x: str(x)[:60])
def test_dashboard_query_parses_and_uses_documented_metrics(where: str, expr: str) -> None:
    assert check(substitute_grafana_variables(expr), CATALOG) == []


def test_alert_rules_cover_the_runbook() -> None:
    names = [r["alert"] for r in alert_rules()]
    assert names == [
        "JobwardenJobsFailing",
        "JobwardenScheduleNoSuccess",
        "JobwardenScheduleSlotsMissed",
        "JobwardenLeaseLost",
        "JobwardenJobsReaped",
        "JobwardenDrainStuck",
        "JobwardenOperatorDown",
        "JobwardenDatabaseUnreachable",
        "JobwardenQueueWaitHigh",
        "JobwardenAutovacuumOff",
        "JobwardenDeadTuplesPilingUp",
        "JobwardenPodRunsNotStarting",
        "JobwardenResourceNotReady",
    ]


def test_every_alert_parses_and_uses_documented_metrics() -> None:
    for rule in alert_rules():
        assert check(rule["expr"], CATALOG) == [], rule["alert"]


def test_every_alert_has_a_summary_severity_and_a_runbook_section() -> None:
    runbook = (ROOT / "docs" / "alerts.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", runbook, flags=re.M)
    }
    for rule in alert_rules():
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["labels"]["team"] == "platform"
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"docs/alerts.md has no section for {rule['alert']}"


def test_a_misspelled_metric_or_label_is_caught() -> None:
    assert check("rate(jobwarden_jobs_complete_total[5m])", CATALOG)
    assert check("sum by (queue) (jobwarden_lease_lost_total)", CATALOG)
    assert check('jobwarden_jobs_running{job_class="x"}', CATALOG)
    with pytest.raises(ValueError):
        check("sum(rate(jobwarden_jobs_failed_total[5m])", CATALOG)


def test_rule_thresholds_follow_the_values() -> None:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    docs = manifests(
        {
            "prometheusRule": {
                "enabled": True,
                "rules": {
                    "queueWaitHigh": {"thresholdSeconds": 42},
                    "scheduleNoSuccess": {"intervals": 5, "learnWindow": "2d"},
                    "drainStuck": {"timeout": "2h", "marginSeconds": 45},
                },
            }
        }
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    exprs = {r["alert"]: r["expr"] for r in rule["spec"]["groups"][0]["rules"]}
    assert "> 42" in exprs["JobwardenQueueWaitHigh"]
    assert "5 * max by (schedule) (jobwarden_schedule_period_seconds)" in \
        exprs["JobwardenScheduleNoSuccess"]
    assert "+ 7200" in exprs["JobwardenDrainStuck"] and "+ 45" in exprs["JobwardenDrainStuck"]


def test_rules_render_from_the_previous_releases_values() -> None:
    """``helm upgrade --reuse-values`` from 0.1.0 renders with 0.1.0's values, which lack
    the keys 0.2.0 added (drainStuck.marginSeconds, window): the rules still parse."""
    from helmchart import CHART

    values = yamlio.load((CHART / "values.yaml").read_text())
    values["database"]["dsn"] = "postgresql://u@h/db"
    values["prometheusRule"]["enabled"] = True
    del values["metrics"]["onlyWhenApiExists"]  # 0.1.0 had none: rendered as before
    for key in ("marginSeconds", "window"):
        del values["prometheusRule"]["rules"]["drainStuck"][key]
    del values["prometheusRule"]["rules"]["resourceNotReady"]
    stuck = _alerts(values)["JobwardenDrainStuck"]["expr"]
    assert "[5m]" in stuck and "+ 30" in stuck
    assert check(stuck, CATALOG) == []


def _alerts(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    (rule,) = [d for d in manifests(values) if d["kind"] == "PrometheusRule"]
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_operator_down_is_only_rendered_when_something_scrapes_the_operator() -> None:
    alone = _alerts({"prometheusRule": {"enabled": True}})
    assert "JobwardenOperatorDown" not in alone  # absent(up{...}) would fire forever
    assert "JobwardenJobsFailing" in alone
    scraped = _alerts({"prometheusRule": {"enabled": True},
                       "metrics": {"serviceMonitor": {"enabled": True}}})
    assert 'job="jw-jobwarden-operator"' in scraped["JobwardenOperatorDown"]["expr"]
    own = _alerts({"prometheusRule": {"enabled": True, "operatorJob": "my-scrape-job"}})
    assert 'job="my-scrape-job"' in own["JobwardenOperatorDown"]["expr"]
    no_operator = _alerts({"prometheusRule": {"enabled": True, "operatorJob": "x"},
                           "operator": {"enabled": False}})
    assert "JobwardenOperatorDown" not in no_operator
    # Scaled to zero on purpose (issue 27): no operator is meant to be up, nothing pages.
    scaled_to_zero = _alerts({"prometheusRule": {"enabled": True, "operatorJob": "x"},
                              "operator": {"replicas": 0}})
    assert "JobwardenOperatorDown" not in scaled_to_zero
    assert "JobwardenJobsFailing" in scaled_to_zero


def test_worker_pods_are_scraped_once_when_both_monitors_are_on() -> None:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    docs = manifests(values_of("full-values.yaml"))
    services = [d for d in docs if d["kind"] == "Service"]
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert [d for d in docs if d["kind"] == "PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s["metadata"]["name"] for s in services
                if selector.items() <= s["metadata"]["labels"].items()]
    assert selected == ["jw-jobwarden-operator"]
    # Without a PodMonitor the ServiceMonitor is what scrapes the workers Service.
    only_services = manifests({"metrics": {"service": {"workers": True},
                                           "serviceMonitor": {"enabled": True}}})
    (monitor,) = [d for d in only_services if d["kind"] == "ServiceMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert sorted(s["metadata"]["name"] for s in only_services if s["kind"] == "Service"
                  and selector.items() <= s["metadata"]["labels"].items()) == [
        "jw-jobwarden-operator", "jw-jobwarden-workers"]


def test_runbook_links_are_absolute_or_absent() -> None:
    for rule in _alerts({"prometheusRule": {"enabled": True}}).values():
        assert "runbook_url" not in rule["annotations"]
    base = "https://runbooks.example.com/jobwarden/alerts.md"
    for rule in alert_rules():
        assert rule["annotations"]["runbook_url"].startswith(base + "#")


def test_rare_event_alerts_count_label_sets_born_inside_the_window() -> None:
    exprs = {r["alert"]: r["expr"] for r in alert_rules()}
    for alert, metric in (("JobwardenLeaseLost", "jobwarden_lease_lost_total"),
                          ("JobwardenJobsReaped", "jobwarden_jobs_reaped_total"),
                          ("JobwardenScheduleSlotsMissed",
                           "jobwarden_schedule_slots_missed_total")):
        assert f"({metric} unless {metric} offset " in exprs[alert], alert


def test_every_stat_panel_has_thresholds_and_colours_by_them() -> None:
    stats = [p for p in DASHBOARD["panels"] if p["type"] == "stat"]
    assert len(stats) >= 6
    for panel in stats:
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults["thresholds"]["steps"]
        assert steps[0]["value"] is None, panel["title"]  # the base colour
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values), panel["title"]
        assert defaults["color"]["mode"] == "thresholds", panel["title"]
    by_title = {p["title"]: p for p in stats}
    db_steps = by_title["Database reachable"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["color"] for s in db_steps] == ["red", "green"]
    assert len(by_title["Jobs failed / s"]["fieldConfig"]["defaults"]["thresholds"]["steps"]) > 1


def test_the_cluster_variable_filters_on_a_label_the_chart_adds() -> None:
    pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    docs = manifests(values_of("full-values.yaml") | {"operator": {"clusterName": "eu-1",
                                                                   "replicas": 2,
                                                                   "peering": {"enabled": True}}})
    for kind, endpoints in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (monitor,) = [d for d in docs if d["kind"] == kind]
        relabelings = monitor["spec"][endpoints][0]["relabelings"]
        assert {"targetLabel": "cluster", "replacement": "eu-1"} in relabelings, kind
    (cluster,) = [v for v in DASHBOARD["templating"]["list"] if v["name"] == "cluster"]
    assert cluster["definition"] == "label_values(jobwarden_db_up, cluster)"
    assert cluster["allValue"] == ".*"  # also matches series without the label
    off = manifests({"metrics": {"clusterLabel": "", "serviceMonitor": {"enabled": True}}})
    (monitor,) = [d for d in off if d["kind"] == "ServiceMonitor"]
    assert "relabelings" not in monitor["spec"]["endpoints"][0]
