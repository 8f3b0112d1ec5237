"""Typed job data: refused at enqueue with a typed error (nothing stored), typed in perform."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import jobwarden
from jobwarden.structs.jobs import JobSpec
from jobwarden.worker.worker import Worker
from tests.support import typedjobs
from tests.support.typedjobs import Invoice, Line

APPS = ["tests.support.typedjobs"]


def test_a_dataclass_instance_is_stored_as_json_and_performed_as_an_instance(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    invoice = Invoice(invoice_id=7, currency="EUR", lines=[Line("a", 2), Line("b")])
    enqueued = client.enqueue(typedjobs.SendInvoice, invoice)
    assert client.job(enqueued.id).data == {
        "invoice_id": 7, "currency": "EUR", "note": None,
        "lines": [{"sku": "a", "quantity": 2}, {"sku": "b", "quantity": 1}]}
    as_dict = client.enqueue(typedjobs.SendInvoice,
                             {"invoice_id": 8, "currency": "USD", "lines": [{"sku": "c"}]})
    start_worker(apps=APPS)
    assert client.wait(enqueued.id, timeout=30) == {"type": "Invoice", "units": 3}
    assert client.wait(as_dict.id, timeout=30) == {"type": "Invoice", "units": 1}


@pytest.mark.parametrize(("data", "message"), [
    ({"currency": "EUR", "lines": []}, "missing invoice_id"),
    ({"invoice_id": "7", "currency": "EUR", "lines": []}, "data.invoice_id must be an integer"),
    ({"invoice_id": 7, "currency": "GBP", "lines": []}, "data.currency must be one of"),
    ({"invoice_id": 7, "currency": "EUR", "lines": [{"sku": 1}]}, r"data.lines\[0\].sku"),
    ({"invoice_id": 7, "currency": "EUR", "lines": [], "extra": 1}, "unknown field"),
    ([7, "EUR"], "must be an object"),
])
def test_data_that_does_not_fit_the_dataclass_is_refused_and_nothing_is_stored(
        client: jobwarden.Client, data: Any, message: str) -> None:
    with pytest.raises(jobwarden.InvalidJobData, match=message):
        client.enqueue(typedjobs.SendInvoice, data)
    with pytest.raises(jobwarden.InvalidJobData):  # a batch is all or nothing
        client.enqueue_many(typedjobs.SendInvoice, [
            {"invoice_id": 1, "currency": "EUR", "lines": []}, data])
    assert isinstance(jobwarden.InvalidJobData("x"), jobwarden.InvalidPayload)
    assert client.jobs() == []


def test_a_typeddict_job_and_a_job_named_by_path_are_checked_too(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    with pytest.raises(jobwarden.InvalidJobData, match=r"data\.times must be an integer"):
        client.enqueue(typedjobs.Greet, {"name": "ann", "times": "2"})
    with pytest.raises(jobwarden.InvalidJobData, match="missing times"):
        client.enqueue("tests.support.typedjobs:Greet", {"name": "ann"})
    assert client.jobs() == []
    ok = client.enqueue("tests.support.typedjobs:Greet", {"name": "ann", "times": 2})
    start_worker(apps=APPS)
    assert client.wait(ok.id, timeout=30) == "hello ann hello ann"


def test_a_pydantic_model_is_validated_by_pydantic_and_handed_over_as_a_model(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    with pytest.raises(jobwarden.InvalidJobData, match="greater than or equal to 0"):
        client.enqueue(typedjobs.Welcome, {"email": "a@b.c", "age": -1})
    enqueued = client.enqueue(typedjobs.Welcome, typedjobs.Signup(email="a@b.c", age=3))
    assert client.job(enqueued.id).data == {"email": "a@b.c", "age": 3}
    start_worker(apps=APPS)
    assert client.wait(enqueued.id, timeout=30) == "a@b.c:3"


@pytest.mark.parametrize(("data", "message"), [
    ({"order_id": 1, "lines": [], "rush": 1}, "unexpected keyword argument 'rush'"),
    ({"lines": []}, "missing a required argument: 'order_id'"),
    ({"order_id": 1, "lines": [{"sku": 3}]}, r"lines\[0\].sku must be a string"),
    ({"order_id": 1, "lines": [], "express": "yes"}, "express must be a boolean"),
    ([1, [], True, 4], "too many positional arguments"),
    ("1", "takes an object"),
])
def test_function_job_arguments_are_checked_against_the_signature(
        client: jobwarden.Client, data: Any, message: str) -> None:
    with pytest.raises(jobwarden.InvalidJobData, match=message):
        client.enqueue(typedjobs.ship, data)
    assert client.jobs() == []


def test_function_job_arguments_are_handed_over_typed(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    by_name = client.enqueue(typedjobs.ship, {"order_id": 4, "lines": [{"sku": "a"}]})
    by_position = client.enqueue(typedjobs.ship, [5, [{"sku": "a"}, {"sku": "b"}], True])
    start_worker(apps=APPS)
    assert client.wait(by_name.id, timeout=30) == 41
    assert client.wait(by_position.id, timeout=30) == 53


def test_stored_data_that_no_longer_fits_fails_without_retries(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    """A job enqueued unchecked (its code elsewhere) with bad data is bad data: not retried."""
    spec = JobSpec(job_class="tests.support.typedjobs:SendInvoice", data={"nope": 1},
                   max_retries=3)
    enqueued = client.enqueue_specs([spec])[0]
    start_worker(apps=APPS)
    with pytest.raises(jobwarden.JobFailed, match="does not fit Invoice"):
        client.wait(enqueued.id, timeout=30)
    assert client.job(enqueued.id).attempts == 1


def test_a_schedule_by_class_path_is_checked_where_the_class_imports(
        client: jobwarden.Client) -> None:
    with pytest.raises(jobwarden.ScheduleError, match="missing times"):
        client.schedules.upsert("greet", interval="1h", job_class="tests.support.typedjobs:Greet",
                                data={"name": "ann"})
    record = client.schedules.upsert("greet", interval="1h",
                                     job_class="tests.support.typedjobs:Greet",
                                     data={"name": "ann", "times": 1})
    assert record.name == "greet"
    # A path the operator or CLI cannot import is only checked for its shape.
    client.schedules.upsert("elsewhere", interval="1h", job_class="not.here:Job",
                            data={"anything": 1})
