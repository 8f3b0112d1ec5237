"""The operator's settings from the chart's environment, kopf's settings, and redaction."""

from __future__ import annotations

import logging

import kopf
import pytest

from jobwarden import errors
from jobwarden.controller import app
from jobwarden.controller.config import OperatorConfig, peering_priority


def test_the_charts_environment_configures_the_operator() -> None:
    config = OperatorConfig.from_env({
        "JOBWARDEN_SCHEMA": "jw", "JOBWARDEN_NAMESPACES": "billing, search,",
        "JOBWARDEN_HTTP_PORT": "9090", "JOBWARDEN_PEERING": "jobwarden",
        "JOBWARDEN_POD_NAME": "jobwarden-operator-7f2kq", "JOBWARDEN_POD_NAMESPACE": "jw",
        "JOBWARDEN_CLUSTER": "east",
    })
    assert config.schema == "jw" and config.namespaces == ("billing", "search")
    assert config.http_port == 9090 and config.peering == "jobwarden"
    assert config.cluster == "east" and config.pod_name == "jobwarden-operator-7f2kq"
    assert config.priority == peering_priority("jobwarden-operator-7f2kq")


def test_defaults_are_cluster_wide_standalone_and_the_default_cluster() -> None:
    config = OperatorConfig.from_env({"JOBWARDEN_NAMESPACES": ""})
    assert config.namespaces == () and config.peering == "" and config.cluster == "default"
    assert config.http_port == 8080 and config.schema == "jobwarden"
    assert config.watch_client_timeout > config.watch_server_timeout


def test_replicas_get_distinct_stable_priorities() -> None:
    names = [f"jobwarden-operator-5d9c8b7f6-{suffix}" for suffix in
             ("x7k2q", "p9z4m", "a1b2c", "zzzzz", "q0w9e")]
    priorities = [peering_priority(n) for n in names]
    assert len(set(priorities)) == len(names)
    assert priorities == [peering_priority(n) for n in names]
    assert all(p > 0 for p in priorities)


def test_an_explicit_priority_wins() -> None:
    assert OperatorConfig.from_env({"JOBWARDEN_PEERING_PRIORITY": "100"}).priority == 100


@pytest.mark.parametrize(("name", "value"), [
    ("JOBWARDEN_HTTP_PORT", "eighty"), ("JOBWARDEN_STATUS_INTERVAL", "soon"),
    ("JOBWARDEN_STATUS_INTERVAL", "0"), ("JOBWARDEN_PEERING_PRIORITY", "high"),
])
def test_a_bad_setting_is_a_configuration_error(name: str, value: str) -> None:
    with pytest.raises(errors.ConfigurationError, match=name):
        OperatorConfig.from_env({name: value})


def test_loop_leases_outlive_a_few_intervals() -> None:
    config = OperatorConfig()
    assert config.loop_lease_ttl(1.0) == 10.0 and config.loop_lease_ttl(15.0) == 45.0
    assert OperatorConfig(loop_lease_seconds=3).loop_lease_ttl(15.0) == 3


def test_kopf_settings_recover_dead_watches_and_keep_state_out_of_status() -> None:
    settings = app.kopf_settings(OperatorConfig(watch_server_timeout=120,
                                                watch_client_timeout=150,
                                                peering="jw", priority=7))
    assert settings.watching.server_timeout == 120
    # The API server parses the watch's timeoutSeconds as an integer ("300.0" is a 400).
    default = app.kopf_settings(OperatorConfig()).watching.server_timeout
    assert default == 300 and isinstance(default, int)
    assert settings.watching.client_timeout == 150
    assert settings.watching.connect_timeout is not None
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.persistence.finalizer == "jobwarden.io/finalizer"
    assert settings.posting.level == logging.WARNING
    assert settings.peering.mandatory and settings.peering.priority == 7


@pytest.mark.parametrize("dsn", [
    "postgresql://jobwarden:s3cret-pw@db.example:5432/jobs",
    "host=db.example user=jobwarden password=s3cret-pw dbname=jobs",
    "postgresql://jobwarden:s3cret%2Dpw@db.example/jobs",
])
def test_the_dsn_and_its_password_never_reach_a_log_line(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    redact = app.Redact(app.secrets_of(dsn))
    logger = logging.getLogger("jobwarden.test.redaction")
    logger.addFilter(redact)
    try:
        with caplog.at_level(logging.INFO, logger="jobwarden.test.redaction"):
            logger.info("connecting with %s failed", dsn)
            logger.info("password was s3cret-pw")
    finally:
        logger.removeFilter(redact)
    text = caplog.text
    assert "s3cret" not in text and dsn not in text
    assert text.count("***") == 2
