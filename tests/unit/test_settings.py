"""settings.py: the one path from flags and JOBWARDEN_* variables to typed settings."""

from __future__ import annotations

import pytest

from jobwarden import errors, settings
from jobwarden.settings import WorkerSettings


def test_a_given_value_wins_over_its_variable_which_wins_over_the_default() -> None:
    env = {"JOBWARDEN_CONCURRENCY": "3", "JOBWARDEN_HEARTBEAT_GRACE": "2m",
           "JOBWARDEN_QUEUES": "a, b,", "JOBWARDEN_POOL": " gpu ", "JOBWARDEN_HTTP_PORT": "0"}
    from_env = WorkerSettings.from_env(env=env)
    assert (from_env.concurrency, from_env.heartbeat_grace, from_env.queues, from_env.pool,
            from_env.http_port) == (3, 120.0, ("a", "b"), "gpu", 0)
    assert from_env.poll_interval == 1.0 and from_env.isolation == "thread"  # defaults
    given = WorkerSettings.from_env(env=env, concurrency=7, heartbeat_grace=None, queues=())
    assert (given.concurrency, given.heartbeat_grace, given.queues) == (7, 120.0, ())


@pytest.mark.parametrize(("name", "value"), [
    ("JOBWARDEN_CONCURRENCY", "many"), ("JOBWARDEN_CONCURRENCY", "0"),
    ("JOBWARDEN_HTTP_PORT", "eighty"), ("JOBWARDEN_POLL_INTERVAL", "soon"),
    ("JOBWARDEN_SHUTDOWN_GRACE", "inf"),
])
def test_a_bad_variable_is_a_configuration_error(name: str, value: str) -> None:
    with pytest.raises(errors.ConfigurationError):
        WorkerSettings.from_env(env={name: value})


def test_a_bad_variable_is_named_in_the_error() -> None:
    with pytest.raises(errors.ConfigurationError, match="JOBWARDEN_POLL_INTERVAL"):
        settings.env_duration("JOBWARDEN_POLL_INTERVAL", 1.0, env={
            "JOBWARDEN_POLL_INTERVAL": "soon"})
    with pytest.raises(errors.ConfigurationError, match="JOBWARDEN_HTTP_PORT"):
        settings.env_int("JOBWARDEN_HTTP_PORT", None, env={"JOBWARDEN_HTTP_PORT": "x"})


def test_durations_take_units_and_blank_means_the_default() -> None:
    env = {"A": "250ms", "B": "1.5h", "C": "  "}
    assert settings.env_duration("A", 9.0, env=env) == 0.25
    assert settings.env_duration("B", 9.0, env=env) == 5400.0
    assert settings.env_duration("C", 9.0, env=env) == 9.0
