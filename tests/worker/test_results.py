"""What a job returns is stored as JSON: values the JSON text cannot hold are mapped
value by value, never by rewriting the text, and never stop the recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobwarden
from jobwarden.worker.results import cap_result
from jobwarden.worker.worker import Worker
from tests.support.waiting import wait_for


class Unusual(jobwarden.Job):
    """Returns what JSON text cannot hold next to strings that look like it."""

    def perform(self, data: Any) -> Any:
        return {"fruit": "BaNaNa", "word": "Infinity and beyond", "low": float("-inf"),
                "high": float("inf"), "nan": float("nan"), "nested": [1.5, float("nan")],
                "nul": "a\x00b", "obj": {1, 2} if data else None}


def test_cap_result_maps_values_not_text() -> None:
    assert cap_result({"s": "BaNaNa", "x": float("-inf")}, 1000) == {"s": "BaNaNa",
                                                                     "x": None}
    assert cap_result("NaN", 1000) == "NaN"
    assert cap_result([float("nan"), "-Infinity"], 1000) == [None, "-Infinity"]
    assert cap_result({"k": "a\x00\udc80"}, 1000) == {"k": "a\ufffd\ufffd"}
    assert cap_result({1: float("nan"), None: 2}, 1000) == {"1": None, "null": 2}


def test_a_job_returning_non_finite_floats_completes_with_them_as_null(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    first = client.enqueue(Unusual, {"set": True}).id
    second = client.enqueue(Unusual).id
    worker = start_worker()

    wait_for(lambda: {client.job(i).status.value for i in (first, second)} == {"completed"},
             timeout=30, message="both jobs completed")
    result = client.job(first).result
    assert result == {"fruit": "BaNaNa", "word": "Infinity and beyond", "low": None,
                      "high": None, "nan": None, "nested": [1.5, None], "nul": "a\ufffdb",
                      "obj": repr({1, 2})}
    assert client.job(first).status.value == "completed"
    assert worker.readiness()[0], "the recorder thread must still be alive"
