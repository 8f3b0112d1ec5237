"""charts/jobwarden renders with Helm's real engine for every scenario, lints
clean, and what it renders is safe: restricted pods, least-privilege RBAC,
CRDs identical to crds/, values that refuse typos, an up-to-date README."""

from __future__ import annotations

import filecmp
import hashlib
import importlib.util
import itertools
import sys
from typing import Any

import pytest
import yaml
from helmchart import CHART, NAMESPACE, ROOT, lint, manifests, render, scenarios, values_of

from tests.support import yamlio

pytest.importorskip(
    "helm_python", reason="pip install helm-python-sdk (Helm's Go engine: render and lint)"
)

SCENARIOS = scenarios()


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every pod spec the chart makes, including the default WorkerPool's template."""
    found = []
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            found.append((name, doc["spec"]["template"]["spec"]))
        elif doc["kind"] == "Pod":
            found.append((name, doc["spec"]))
        elif doc["kind"] == "WorkerPool":
            found.append((name, doc["spec"]["template"]["spec"]))
    return found


# --- the engine itself ------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_lints_clean_in_strict_mode(scenario: str) -> None:
    report = lint(values_of(scenario))
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [] and not report["errors"]


def test_helm_sdkpy_lints_the_defaults_clean() -> None:
    pytest.importorskip(
        "helm_sdkpy",
        reason="pip install --ignore-requires-python helm-sdkpy (second Helm binding, lint only)",
    )
    from helmchart import sdkpy_lint

    report = sdkpy_lint()
    assert not report.get("Errors")
    assert all(m["Severity"] < 2 for m in report.get("Messages") or [])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_renders_valid_kubernetes_objects(scenario: str) -> None:
    docs = manifests(values_of(scenario))
    assert by_kind(docs, "Deployment"), "no operator Deployment"
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"):
            assert doc["metadata"].get("namespace"), f"{doc['kind']} without a namespace"


@pytest.mark.parametrize(
    "values",
    [
        {"operator": {"replicas": 2}},
        {"workerPool": {"replica": 2}},
        {"operatr": {}},
        {"prometheusRule": {"rules": {"jobsFailing": {"window": "15 minutes"}}}},
        {"workerPool": {"isolation": "fork"}},
        {"prometheusRule": {"runbookBaseUrl": "docs/alerts.md"}},
    ],
    ids=["replicas-without-peering", "typo-in-pool", "typo-at-top", "bad-duration", "bad-enum",
         "relative-runbook"],
)
def test_values_schema_refuses_typos_and_bad_values(values: dict[str, Any]) -> None:
    report = lint(values)
    assert any(m["severity"] >= 3 and "schema" in m["error"] for m in report["messages"])


# --- restricted Pod Security ------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_meets_the_restricted_pod_security_standard(scenario: str) -> None:
    specs = pod_specs(manifests(values_of(scenario)))
    assert specs
    for name, spec in specs:
        pod = spec.get("securityContext", {})
        assert pod.get("runAsNonRoot") is True, name
        assert isinstance(pod.get("runAsUser"), int) and pod["runAsUser"] > 0, name
        assert pod.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name
        for container in spec["containers"]:
            sc = container.get("securityContext", {})
            where = f"{name} container {container['name']}"
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert sc.get("privileged") in (None, False), where
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where}: read-only root needs an emptyDir on /tmp"
        tmp = [v for v in spec["volumes"] if v["name"] == "tmp"]
        assert tmp and "emptyDir" in tmp[0], name


def test_operator_has_probes_on_its_http_port_and_no_resources_by_default() -> None:
    (deployment,) = by_kind(manifests(None), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "operator"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert [p["name"] for p in container["ports"]] == ["http"]
    assert "resources" not in container


def test_dsn_is_mounted_as_a_file_never_an_env_value() -> None:
    docs = manifests(values_of("full-values.yaml"))
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOBWARDEN_DSN_FILE"]["value"] == "/var/run/secrets/jobwarden/dsn/dsn"
    assert all("secretKeyRef" not in e.get("valueFrom", {}) for e in container["env"])
    rendered = yaml.safe_dump(deployment)
    assert "postgresql://" not in rendered


def test_existing_dsn_secret_is_used_and_none_is_created() -> None:
    docs = manifests(values_of("namespaced-values.yaml"))
    assert not [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-dsn")]
    (deployment,) = by_kind(docs, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dsn"]["secret"]["secretName"] == "shared-postgres"
    assert volumes["dsn"]["secret"]["items"] == [{"key": "url", "path": "url"}]


def test_tick_token_secret_is_off_by_default_and_generated_when_on() -> None:
    assert not by_kind(manifests({"database": {"existingSecret": "db"}}), "Secret")
    docs = manifests(values_of("full-values.yaml"))
    (tick,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-tick")]
    assert len(tick["data"]["token"]) >= 48


def test_default_worker_pool_is_accepted_by_the_worker_pool_crd() -> None:
    spec = importlib.util.spec_from_file_location("crdschema", ROOT / "tests/crds/crdschema.py")
    assert spec and spec.loader
    crdschema = importlib.util.module_from_spec(spec)
    sys.modules["crdschema"] = crdschema
    spec.loader.exec_module(crdschema)
    pytest.importorskip("celpy", reason="pip install cel-python")
    (pool,) = by_kind(manifests(values_of("full-values.yaml")), "WorkerPool")
    _, errors = crdschema.admit(crdschema.load_crds()["WorkerPool"], pool)
    assert errors == []


# --- RBAC -------------------------------------------------------------------------------

OPERATOR_RULES = {
    # (apiGroup, resource): verbs -- exactly what kopf and the operator call.
    ("jobwarden.io", "workerpools"): {"get", "list", "watch", "patch", "update"},
    ("jobwarden.io", "jobschedules"): {"get", "list", "watch", "patch", "update"},
    # delete: an ExclusiveJob's spec.ttlSecondsAfterFinished
    ("jobwarden.io", "exclusivejobs"): {"get", "list", "watch", "patch", "update", "delete"},
    ("jobwarden.io", "workerpools/status"): {"get", "patch", "update"},
    ("jobwarden.io", "jobschedules/status"): {"get", "patch", "update"},
    ("jobwarden.io", "exclusivejobs/status"): {"get", "patch", "update"},
    # blockOwnerDeletion on worker and run pods (OwnerReferencesPermissionEnforcement, OpenShift)
    ("jobwarden.io", "workerpools/finalizers"): {"update"},
    ("jobwarden.io", "jobschedules/finalizers"): {"update"},
    ("jobwarden.io", "exclusivejobs/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "events"): {"create", "patch"},
    # a WorkerPool's optional PodDisruptionBudget (spec.podDisruptionBudget)
    ("policy", "poddisruptionbudgets"): {"get", "create", "patch", "delete"},
    ("", "secrets"): {"get"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"list", "watch"},
}


def flatten(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_rbac_rule_uses_a_wildcard(scenario: str) -> None:
    for doc in manifests(values_of(scenario)):
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in item for item in rule.get(key, [])), (doc["metadata"], rule)


def operator_grants(docs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """Grants of the operator's ServiceAccount, keyed by namespace ("*" = cluster-wide).
    (Other accounts of the chart, such as crds.upgradeJob's, are not the operator's.)"""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    grants: dict[str, dict[tuple[str, str], set[str]]] = {}
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["namespace"] == NAMESPACE
            and s["name"].endswith("-operator")
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])]
        for key, verbs in flatten(role["rules"]).items():
            grants.setdefault(ns or "*", {}).setdefault(key, set()).update(verbs)
    return grants


SECRETS = ("", "secrets")


def test_cluster_wide_operator_gets_exactly_what_it_calls() -> None:
    """Secrets only in the release's namespace (issue 27: cluster-wide ``get secrets`` by
    default); the DSNSecretReady condition says Unknown/Forbidden elsewhere."""
    grants = operator_grants(manifests(None))
    cluster = {k: v for k, v in OPERATOR_RULES.items() if k != SECRETS}
    assert grants == {"*": cluster, NAMESPACE: {SECRETS: {"get"}}}


def test_secrets_are_granted_where_rbac_secret_namespaces_says() -> None:
    listed = operator_grants(manifests({"rbac": {"secretNamespaces": ["app1", "app2"]}}))
    assert {ns: g for ns, g in listed.items() if ns != "*"} == {
        "app1": {SECRETS: {"get"}}, "app2": {SECRETS: {"get"}}}
    assert SECRETS not in listed["*"]
    everywhere = operator_grants(manifests({"rbac": {"secretNamespaces": ["*"]}}))
    assert everywhere["*"][SECRETS] == {"get"} and list(everywhere) == ["*"]


def test_peering_adds_only_kopfs_cluster_peering() -> None:
    grants = operator_grants(manifests(values_of("full-values.yaml")))
    expected = {k: v for k, v in OPERATOR_RULES.items() if k != SECRETS}
    expected[("kopf.dev", "clusterkopfpeerings")] = {"get", "list", "watch", "patch"}
    assert grants == {"*": expected, NAMESPACE: {SECRETS: {"get"}}}


def test_namespaced_operator_gets_roles_only_in_its_namespaces() -> None:
    grants = operator_grants(manifests(values_of("namespaced-values.yaml")))
    cluster = {
        k: v
        for k, v in OPERATOR_RULES.items()
        if k[1] in ("customresourcedefinitions", "namespaces")
    }
    namespaced = {k: v for k, v in OPERATOR_RULES.items() if k not in cluster}
    namespaced[("kopf.dev", "kopfpeerings")] = {"get", "list", "watch", "patch"}
    assert grants == {"*": cluster, "billing": namespaced, "search": namespaced}


# --- CRDs, NOTES, README ----------------------------------------------------------------


def test_chart_crds_are_identical_to_the_repository_crds() -> None:
    repo = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    chart = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert set(repo) <= set(chart)
    assert set(chart) - set(repo) == {"kopf.dev_peerings.yaml"}
    for name in repo:
        assert filecmp.cmp(ROOT / "crds" / name, CHART / "crds" / name, shallow=False), name


def test_notes_tell_how_to_check_status_find_metrics_and_get_the_token() -> None:
    notes = render(values_of("full-values.yaml"))["jobwarden/templates/NOTES.txt"]
    assert "rollout status deployment/jw-jobwarden-operator" in notes
    assert "/metrics" in notes
    assert "get secret jw-jobwarden-tick" in notes


def test_an_install_without_a_dsn_fails_at_render_time_with_a_message() -> None:
    """Issue 27: it rendered, and the operator sat in ContainerCreating forever."""
    import helm_python

    for values in (None, {"image": {"tag": "0.2.0"}}, {"console": {"enabled": True},
                                                       "operator": {"enabled": False}}):
        with pytest.raises(helm_python.HelmRenderError, match=r"database\.existingSecret"):
            render(values, raw=True)
    assert render({"database": {"existingSecret": "db"}}, raw=True)
    # Nothing that reads the DSN is installed: nothing to ask for.
    assert render({"operator": {"enabled": False}}, raw=True)


def test_monitors_are_rendered_only_where_their_api_is_served() -> None:
    """Offline, as on a cluster without prometheus-operator: the documented install with
    the monitors on renders none of them (issue 27: ``no matches for kind PodMonitor``)
    and NOTES says so; the real API server's side is tests/cluster/test_helm_install.py."""
    values = {"database": {"existingSecret": "db"},
              "metrics": {"podMonitor": {"enabled": True},
                          "serviceMonitor": {"enabled": True}},
              "prometheusRule": {"enabled": True}}
    rendered = render(values, raw=True)
    kinds = {doc["kind"] for path, text in rendered.items() if not path.endswith(".txt")
             for doc in yamlio.load_all(text) if doc and "kind" in doc}
    assert not kinds & {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    notes = rendered["jobwarden/templates/NOTES.txt"]
    assert "Not created: PodMonitor, PrometheusRule, ServiceMonitor" in notes
    forced = manifests({**values, "metrics": {**values["metrics"], "onlyWhenApiExists": False}})
    assert {"PodMonitor", "ServiceMonitor", "PrometheusRule"} <= {d["kind"] for d in forced}


def test_the_pod_monitor_selects_the_watched_namespaces() -> None:
    """Issue 27: ``any: true`` even with watchNamespaces set; two releases scraped every
    worker twice."""
    def selector(values: dict[str, Any]) -> dict[str, Any]:
        (monitor,) = by_kind(manifests({"metrics": {"podMonitor": {"enabled": True}},
                                        **values}), "PodMonitor")
        return dict(monitor["spec"]["namespaceSelector"])

    assert selector({}) == {"any": True}
    assert selector({"operator": {"watchNamespaces": ["app1", "app2"]}}) == {
        "matchNames": ["app1", "app2"]}
    assert selector({"operator": {"watchNamespaces": ["app1"]},
                     "metrics": {"podMonitor": {"enabled": True,
                                                "namespaces": ["other"]}}}) == {
        "matchNames": ["other"]}


def test_readme_is_generated_from_the_current_values() -> None:
    spec = importlib.util.spec_from_file_location("chart_readme", ROOT / "charts/readme.py")
    assert spec and spec.loader
    readme = importlib.util.module_from_spec(spec)
    sys.modules["chart_readme"] = readme
    spec.loader.exec_module(readme)
    _, undocumented = readme.parse((CHART / "values.yaml").read_text())
    assert undocumented == []
    assert (CHART / "README.md").read_text() == readme.generate(), "run: python charts/readme.py"


def test_a_default_pool_outside_the_watched_namespaces_is_refused() -> None:
    values = {"workerPool": {"enabled": True}, "database": {"dsn": "postgresql://x/y"},
              "operator": {"watchNamespaces": ["billing"]}}
    with pytest.raises(Exception, match="does not include"):
        render(values)
    watched = manifests({**values, "operator": {"watchNamespaces": ["billing", NAMESPACE]}})
    assert by_kind(watched, "WorkerPool")
    elsewhere = manifests({**values, "operator": {"enabled": False,
                                                  "watchNamespaces": ["billing"]}})
    assert by_kind(elsewhere, "WorkerPool")  # another release's operator may watch it


def test_the_default_pool_takes_scheduling_knobs() -> None:
    values = {"workerPool": {
        "enabled": True, "serviceAccountName": "jobs", "nodeSelector": {"pool": "batch"},
        "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {}}, "priorityClassName": "low",
        "podAnnotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
        "database": {"dsn": "postgresql://x/y"}}
    (pool,) = by_kind(manifests(values), "WorkerPool")
    template = pool["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == "jobs"
    assert template["spec"]["nodeSelector"] == {"pool": "batch"}
    assert template["spec"]["tolerations"][0]["key"] == "batch"
    assert template["spec"]["priorityClassName"] == "low"
    assert template["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


# --- chart knobs (prometheus-community practice) ----------------------------------------


def test_namespace_override_moves_every_namespaced_resource() -> None:
    docs = manifests({"namespaceOverride": "jobwarden-system", "database": {"dsn": "x"},
                      "workerPool": {"enabled": True}, "tick": {"enabled": True},
                      "metrics": {"serviceMonitor": {"enabled": True}}})
    namespaces = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
    assert namespaces == {"jobwarden-system"}
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "jobwarden-system"


def test_operator_knobs_reach_the_deployment() -> None:
    mount = {"name": "ca", "mountPath": "/etc/ca", "readOnly": True}
    sidecar = {"name": "proxy", "image": "example/proxy:1"}
    (deployment,) = by_kind(manifests({"operator": {
        "revisionHistoryLimit": 5, "extraVolumes": [{"name": "ca", "configMap": {"name": "ca"}}],
        "extraVolumeMounts": [mount], "extraContainers": [sidecar],
        "initContainers": [{"name": "wait", "image": "busybox:1"}]},
        "image": {"registry": "mirror.example/", "repository": "jobwarden/jobwarden",
                  "tag": "1.2.3"}}), "Deployment")
    spec = deployment["spec"]
    assert spec["revisionHistoryLimit"] == 5
    pod = spec["template"]["spec"]
    operator, proxy = pod["containers"]
    assert operator["image"] == "mirror.example/jobwarden/jobwarden:1.2.3"
    assert mount in operator["volumeMounts"] and proxy == sidecar
    assert {"name": "ca", "configMap": {"name": "ca"}} in pod["volumes"]
    assert pod["initContainers"][0]["name"] == "wait"
    # Migrations run before /healthz answers: a startup probe, then a strict liveness probe.
    assert operator["startupProbe"]["httpGet"]["path"] == "/healthz"
    startup = operator["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_monitors_and_rules_can_live_in_prometheus_s_namespace_with_a_job_label() -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True, "namespace": "monitoring",
                                             "jobLabel": "app.kubernetes.io/name"}},
              "prometheusRule": {"enabled": True, "namespace": "monitoring"}}
    docs = manifests(values)
    (monitor,) = by_kind(docs, "ServiceMonitor")
    (rule,) = by_kind(docs, "PrometheusRule")
    assert monitor["metadata"]["namespace"] == rule["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert 'job="jobwarden"' in alerts["JobwardenOperatorDown"]["expr"]
    with pytest.raises(Exception, match="not a label of the operator Service"):
        render({**values, "metrics": {"serviceMonitor": {"enabled": True, "jobLabel": "nope"}},
                "prometheusRule": {"enabled": True}})


def test_network_policy_admits_only_the_http_port() -> None:
    assert not by_kind(manifests(None), "NetworkPolicy")
    peer = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    (policy,) = by_kind(manifests({"networkPolicy": {"enabled": True, "allowFrom": [peer]}}),
                        "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}] and rule["from"] == [peer]
    (deployment,) = by_kind(manifests(None), "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()


def test_helm_test_checks_the_operator_and_the_database() -> None:
    (pod,) = [d for d in by_kind(manifests(None), "Pod")
              if d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    script = pod["spec"]["containers"][0]["command"][-1]
    assert "jw-jobwarden-operator.jobs.svc:8080" in script
    assert "/readyz" in script and '"jobwarden", "status"' in script
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["JOBWARDEN_DSN_FILE"].endswith("/dsn")
    assert not by_kind(manifests({"tests": {"enabled": False}}), "Pod")



def test_the_console_is_off_by_default() -> None:
    for scenario in (None, values_of("full-values.yaml")):
        docs = manifests(scenario)
        assert not [d for d in docs if d["metadata"]["name"].endswith("-console")]


def test_the_console_runs_read_only_behind_a_service_with_a_token_file() -> None:
    values = {"database": {"dsn": "postgresql://x/y"}, "console": {"enabled": True}}
    docs = manifests(values)
    (deployment,) = [d for d in by_kind(docs, "Deployment")
                     if d["metadata"]["name"].endswith("-console")]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert deployment["spec"]["replicas"] == 1  # its CSRF key is per process
    (container,) = spec["containers"]
    args = container["args"]
    assert args[0] == "console" and "--read-only" in args  # read-only unless asked
    assert args[args.index("--host") + 1] == "0.0.0.0"
    env = {e["name"]: e for e in container["env"]}
    token_file = env["JOBWARDEN_CONSOLE_TOKEN_FILE"]["value"]
    assert token_file == "/var/run/secrets/jobwarden/console/token"
    assert env["JOBWARDEN_HTTP_PORT"]["value"] == "8787"
    assert container["ports"] == [{"name": "http", "containerPort": 8787, "protocol": "TCP"}]
    assert env["JOBWARDEN_DSN_FILE"]["value"] == "/var/run/secrets/jobwarden/dsn/dsn"
    assert all("valueFrom" not in e for e in container["env"])  # secrets are files only
    assert "tcpSocket" in container["readinessProbe"]  # every HTTP path wants the token
    volumes = {v["name"]: v for v in spec["volumes"]}
    (secret,) = [s for s in by_kind(docs, "Secret")
                 if s["metadata"]["name"] == volumes["token"]["secret"]["secretName"]]
    assert len(secret["data"]["token"]) >= 24  # a random token, generated
    (service,) = [s for s in by_kind(docs, "Service")
                  if s["metadata"]["name"].endswith("-console")]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_console_can_act_and_use_an_existing_token_secret() -> None:
    docs = manifests(values_of("console-values.yaml"))
    (deployment,) = by_kind(docs, "Deployment")  # the operator is off in this scenario
    spec = deployment["spec"]["template"]["spec"]
    assert "--read-only" not in spec["containers"][0]["args"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "console-token"
    assert not by_kind(docs, "Secret")


@pytest.mark.parametrize("console", [{"enabled": True, "token": "short"},
                                     {"enabled": True, "readOnly": "yes"},
                                     {"enabled": True, "tokn": "x" * 20}])
def test_console_values_are_checked(console: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"meet the specifications of the schema"):
        render({"database": {"dsn": "postgresql://x/y"}, "console": console})


def _numeric_checksum_dsn() -> str:
    """A DSN whose rendered Secret's checksum (sha256, first 16 hex digits) is all digits.

    Such a checksum is a YAML integer unless the template quotes it, and the API
    server then refuses the Deployment ("cannot unmarshal number into ...
    annotations of type string"): a user with that DSN could not install the chart.
    """
    values = {"database": {"dsn": "postgresql://x/PLACEHOLDER"}}
    secret = render(values)["jobwarden/templates/secret-dsn.yaml"]
    for n in itertools.count():
        dsn = f"postgresql://x/{n}"
        digest = hashlib.sha256(secret.replace("postgresql://x/PLACEHOLDER", dsn).encode())
        if digest.hexdigest()[:16].isdigit():
            return dsn
    raise AssertionError("unreachable")


def test_annotations_and_labels_stay_strings_when_a_checksum_is_all_digits() -> None:
    dsn = _numeric_checksum_dsn()
    docs = manifests({"database": {"dsn": dsn}, "console": {"enabled": True}})
    deployments = by_kind(docs, "Deployment")
    assert len(deployments) == 2  # the operator's and the console's
    for doc in deployments:
        annotations = doc["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/dsn"].isdigit()  # the case this test is about
    for doc in docs:
        for meta in (doc["metadata"], doc.get("spec", {}).get("template", {}).get("metadata", {})):
            for key in ("annotations", "labels"):
                for name, value in (meta.get(key) or {}).items():
                    assert isinstance(value, str), (doc["kind"], key, name, value)
