"""Job definitions: classes, decorated functions, import paths and backoff."""

from __future__ import annotations

import pytest

import jobwarden
from jobwarden.jobs import definitions
from tests.support import testjobs


def test_jobs_are_named_by_import_path() -> None:
    assert testjobs.Record.path() == "tests.support.testjobs:Record"
    assert testjobs.add.path() == "tests.support.testjobs:add"
    assert definitions.resolve("tests.support.testjobs:add") is testjobs.add.job_class
    assert definitions.resolve("tests.support.testjobs:Record") is testjobs.Record


def test_a_decorated_function_is_still_callable() -> None:
    assert testjobs.add(2, 3) == 5


@pytest.mark.parametrize("path,message", [
    ("nocolon", "must look like"),
    ("tests.support.testjobs:Nope", "has no 'Nope'"),
    ("tests.support.nomodule:X", "cannot import"),
    ("tests.support.testjobs:audit", "neither a jobwarden.Job"),
])
def test_bad_paths_raise_unknown_job_with_the_reason(path: str, message: str) -> None:
    with pytest.raises(jobwarden.UnknownJob, match=message):
        definitions.resolve(path)


def test_unknown_decorator_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown job option"):
        jobwarden.job(retries=3)  # type: ignore[call-overload]


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    class Job(jobwarden.Job):
        backoff_base = 1.0
        backoff_max = 10.0

    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 10.0)]:
        samples = [Job.backoff(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert max(samples) - min(samples) > ceiling / 10  # jittered, not constant


def test_function_data_shapes() -> None:
    assert definitions.call_with_data(lambda: 1, None) == 1
    assert definitions.call_with_data(lambda a, b: a - b, [5, 3]) == 2
    assert definitions.call_with_data(lambda a, b: a - b, {"b": 5, "a": 3}) == -2
    with pytest.raises(jobwarden.BadJobData):
        definitions.call_with_data(lambda a: a, 7)
