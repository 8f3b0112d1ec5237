"""specs.py: what the operator accepts from a JobSchedule or ExclusiveJob spec, and how."""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.controller import specs
from jobwarden.schedules import validation


def schedule(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"interval": "5m", "job": {"class": "billing.jobs:Send"}}
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def test_a_minimal_interval_schedule_gets_the_documented_defaults() -> None:
    parsed = specs.parse_job_schedule(schedule())
    assert parsed.interval == "5m" and parsed.cron is None
    assert parsed.timezone == "UTC"
    assert parsed.catch_up == "latest" and parsed.catch_up_window_seconds == 3600
    assert parsed.catch_up_max == 10 and parsed.overlap == "Allow" and not parsed.suspended
    assert parsed.job == specs.JobTemplate(job_class="billing.jobs:Send", data={}, queue=None,
                                           priority=None, timeout_seconds=None,
                                           max_retries=None)


def test_store_arguments_carry_every_field_in_the_stores_vocabulary() -> None:
    parsed = specs.parse_job_schedule(schedule(
        interval=None, schedule="30 2 * * 1-5", timeZone="Europe/Berlin",
        job={"class": "a.b:C", "data": {"n": 1}, "queue": "billing", "priority": 10,
             "timeoutSeconds": 1800, "maxRetries": 3},
        catchUp="all", catchUpWindowSeconds=7200, catchUpMax=4, concurrencyPolicy="Forbid",
        suspend=True, workerPool="billing-workers"))
    assert parsed.store_arguments() == {
        "cron": "30 2 * * 1-5", "interval": None, "timezone": "Europe/Berlin",
        "job_class": "a.b:C", "data": {"n": 1}, "queue": "billing", "priority": 10,
        "timeout_seconds": 1800, "max_retries": 3, "catch_up": "all",
        "catch_up_window_seconds": 7200, "catch_up_max": 4, "overlap": "Forbid",
        "suspended": True,
    }
    assert parsed.worker_pool == "billing-workers"


def test_an_interval_ignores_the_time_zone_but_a_misspelled_zone_is_still_refused() -> None:
    assert specs.parse_job_schedule(schedule(timeZone="Europe/Berlin")).timezone == "UTC"
    with pytest.raises(specs.SpecError) as caught:
        specs.parse_job_schedule(schedule(timeZone="Europe/Berlinn"))
    assert caught.value.field == "timeZone"


@pytest.mark.parametrize(("spec", "field", "words"), [
    (schedule(interval=None, schedule="*/5 * * * * *"), "schedule", "field"),
    (schedule(interval=None, schedule="0 0 31 2 *"), "schedule", "never"),
    (schedule(interval=None, schedule="0 2 * * *", timeZone="Mars/Olympus"), "timeZone",
     "unknown time zone"),
    (schedule(interval="0s"), "interval", "zero"),
    (schedule(schedule="0 * * * *"), "schedule", "exactly one"),
    (schedule(interval=None), "schedule", "exactly one"),
    (schedule(job={"class": "not a path"}), "job.class", "package.module:Name"),
    (schedule(job={}), "job.class", "required"),
    (schedule(job="billing.jobs:Send"), "job", "object"),
    (schedule(job={"class": "a:B", "data": [1]}), "job.data", "object"),
    (schedule(job={"class": "a:B", "timeoutSeconds": 0}), "job.timeoutSeconds", "at least 1"),
    (schedule(job={"class": "a:B", "priority": "high"}), "job.priority", "integer"),
    (schedule(job={"class": "a:B", "queue": "Billing Queue"}), "job.queue", "queue name"),
    (schedule(catchUp="sometimes"), "catchUp", "one of"),
    (schedule(catchUpWindowSeconds=10), "catchUpWindowSeconds", "at least 60"),
    (schedule(concurrencyPolicy="forbid"), "concurrencyPolicy", "Allow, Forbid, Replace"),
    (schedule(suspend="yes"), "suspend", "true or false"),
])
def test_a_bad_schedule_spec_names_the_field_and_the_fix(spec: dict[str, Any], field: str,
                                                          words: str) -> None:
    with pytest.raises(specs.SpecError) as caught:
        specs.parse_job_schedule(spec)
    assert caught.value.field == field
    assert words.lower() in str(caught.value).lower()
    assert str(caught.value).startswith(f"spec.{field}: ")


def test_a_missing_or_non_object_spec_is_refused() -> None:
    with pytest.raises(specs.SpecError):
        specs.parse_job_schedule(None)
    with pytest.raises(specs.SpecError):
        specs.parse_job_schedule(["interval", "5m"])  # type: ignore[arg-type]


def test_an_exclusive_job_takes_the_key_lease_or_else_the_class_lease() -> None:
    keyed = specs.parse_exclusive_job({"job": {"class": "search.jobs:Reindex"},
                                       "concurrencyKey": "search-index"})
    assert keyed.lease_name == "key:search-index"
    assert keyed.on_busy == "defer" and keyed.lease_ttl_seconds is None
    by_class = specs.parse_exclusive_job({"job": {"class": "search.jobs:Reindex"},
                                          "lease": {"ttlSeconds": 120, "onBusy": "skip"}})
    assert by_class.lease_name == "job:search.jobs:Reindex"
    assert (by_class.on_busy, by_class.lease_ttl_seconds) == ("skip", 120)


def test_a_very_long_key_maps_to_the_same_hashed_lease_name_the_worker_uses() -> None:
    from jobwarden.structs.leases import lease_name

    key = "k" * 200
    parsed = specs.parse_exclusive_job({"job": {"class": "a:B"}, "concurrencyKey": key})
    assert parsed.lease_name == lease_name(f"key:{key}") and len(parsed.lease_name) == 200


def test_an_exclusive_jobs_pod_history_defaults_to_cronjobs_three_and_one() -> None:
    default = specs.parse_exclusive_job({"job": {"class": "a:B"}})
    assert (default.successful_history, default.failed_history) == (3, 1)
    own = specs.parse_exclusive_job({"job": {"class": "a:B"}, "successfulJobsHistoryLimit": 0,
                                     "failedJobsHistoryLimit": 7})
    assert (own.successful_history, own.failed_history) == (0, 7)


@pytest.mark.parametrize(("spec", "field"), [
    ({"job": {"class": "a:B"}, "lease": {"onBusy": "wait"}}, "lease.onBusy"),
    ({"job": {"class": "a:B"}, "failedJobsHistoryLimit": -1}, "failedJobsHistoryLimit"),
    ({"job": {"class": "a:B"}, "successfulJobsHistoryLimit": 1.5},
     "successfulJobsHistoryLimit"),
    ({"job": {"class": "a:B"}, "lease": {"ttlSeconds": 1}}, "lease.ttlSeconds"),
    ({"job": {"class": "a:B"}, "lease": "defer"}, "lease"),
    ({"job": {"class": "a:B"}, "concurrencyKey": 7}, "concurrencyKey"),
    ({"concurrencyKey": "x"}, "job.class"),
])
def test_a_bad_exclusive_job_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(specs.SpecError) as caught:
        specs.parse_exclusive_job(spec)
    assert caught.value.field == field


def test_names_and_keys_are_namespaced_and_idempotent() -> None:
    assert specs.schedule_row_name("billing", "nightly") == "billing/nightly"
    assert specs.exclusive_unique_key("u-1", 3) == "exclusivejob:u-1:3"
    assert specs.source_of("east") == "kubernetes:east"


def test_a_schedule_spec_is_validated_once_and_the_store_definition_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler compares and applies ``validated``: nothing validates it again."""
    real = validation.validate
    calls: list[str] = []

    def counted(name: str, **arguments: Any) -> Any:
        calls.append(name)
        return real(name, **arguments)

    monkeypatch.setattr(validation, "validate", counted)
    parsed = specs.parse_job_schedule(schedule(), row_name="ns/nightly", source="kubernetes:c")
    assert calls == ["ns/nightly"]
    assert parsed.validated is not None and parsed.validated.name == "ns/nightly"
    assert parsed.validated.spec_hash == real(
        "ns/nightly", **parsed.store_arguments(), source="kubernetes:c").spec_hash
