"""crds/ and the operator agree: every field the code reads or writes is in the schema.

The CRDs and the parser are kept by hand in two places; this is what keeps a
renamed field from being silently ignored (read side) or pruned by the API
server (write side), and the documented examples from drifting away from what
the operator accepts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest

from jobwarden.controller import specs
from jobwarden.controller.exclusivejobs import status as xst
from jobwarden.controller.jobschedules import status as sst
from jobwarden.controller.kube import status as st
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.leases import LeaseRecord
from jobwarden.structs.states import JobStatus
from tests.support import yamlio

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def crd_schema(kind: str) -> dict[str, Any]:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yamlio.load_all(path.read_text()):
            if doc and doc.get("spec", {}).get("names", {}).get("kind") == kind:
                version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1")
                return dict(version["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {kind}")


def has_path(schema: dict[str, Any], dotted: str) -> bool:
    node = schema
    for part in dotted.split("."):
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        if node.get("type") == "array":
            node = node.get("items", {})
        properties = node.get("properties", {})
        if part not in properties:
            return False
        node = properties[part]
    return True


def leaf_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.add(path)
        if sub.get("type") == "object" and not sub.get("x-kubernetes-preserve-unknown-fields"):
            out |= leaf_paths(sub, f"{path}.")
    return out


def written_paths(value: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            out.add(f"{prefix}{key}")
            out |= written_paths(sub, f"{prefix}{key}.")
    elif isinstance(value, list):
        for item in value:
            out |= written_paths(item, prefix)
    return out


KINDS = [("JobSchedule", specs.SCHEDULE_FIELDS), ("ExclusiveJob", specs.EXCLUSIVE_FIELDS)]


@pytest.mark.parametrize(("kind", "fields"), KINDS)
def test_every_field_the_parser_reads_is_in_the_crd(kind: str, fields: tuple[str, ...]) -> None:
    spec = crd_schema(kind)["properties"]["spec"]
    assert [f for f in fields if not has_path(spec, f)] == []


@pytest.mark.parametrize(("kind", "fields"), KINDS)
def test_every_spec_field_of_the_crd_is_read_by_the_parser(kind: str,
                                                           fields: tuple[str, ...]) -> None:
    spec = crd_schema(kind)["properties"]["spec"]
    # Below spec.podTemplate is Kubernetes' own pod schema: the template is read whole.
    assert {p for p in leaf_paths(spec) if not p.startswith("podTemplate.")} - set(fields) \
        == set()


def test_every_status_field_the_operator_writes_is_in_the_crd() -> None:
    conditions = [st.Condition(type="Ready", status="True", reason="Synced", message="m")]
    view = sst.ScheduleView(last_slot=T0, next_slot=T0, suspended=False, enqueued=1, skipped=0,
                            missed=0, last_job_id=1, last_job_status="completed",
                            last_job_finished_at=T0)
    schedule = sst.schedule_status(previous=None, generation=1, view=view, now=T0,
                                   conditions=conditions)
    status_schema = crd_schema("JobSchedule")["properties"]["status"]
    assert [p for p in written_paths(schedule) if not has_path(status_schema, p)] == []
    assert set(sst.SCHEDULE_KEYS) <= set(status_schema["properties"])

    job = JobRecord(
        id=1, queue="q", job_class="a:B", data={}, priority=0, status=JobStatus.COMPLETED,
        run_at=T0, attempts=1, max_retries=0, timeout_seconds=1, idempotent=True,
        unique_key=None, lease_name="key:k", claimed_by="w", claimed_at=T0, heartbeat_at=T0,
        cancel_requested=False, deferrals=1, lease_lost=True, lease_token=3,
        result={"any": ["json"]}, last_error=None, schedule_name=None, created_at=T0,
        updated_at=T0, finished_at=T0)
    lease = LeaseRecord(name="key:k", slot=0, owner=str(uuid.uuid4()), holder_host="w",
                        token=3, acquired_at=T0, expires_at=T0, expires_in_seconds=5.0)
    exclusive = xst.exclusive_status(
        previous=None, generation=1, job=job, lease=lease, now=T0,
        conditions=xst.exclusive_conditions(error=None, job=job, lease_name="key:k"))
    status_schema = crd_schema("ExclusiveJob")["properties"]["status"]
    assert [p for p in written_paths(exclusive) if not has_path(status_schema, p)] == []
    assert set(xst.EXCLUSIVE_KEYS) <= set(status_schema["properties"])


def test_the_phases_are_the_crds_enum() -> None:
    enum = crd_schema("ExclusiveJob")["properties"]["status"]["properties"]["phase"]["enum"]
    assert list(typing.get_args(xst.Phase)) == enum


@pytest.mark.parametrize(("kind", "types"), [
    ("JobSchedule", {"Ready", "Conflicting", "Suspended"}),
    ("ExclusiveJob", {"Ready", "Complete", "Failed", "LeaseLost"}),
])
def test_the_condition_types_written_are_the_documented_ones(kind: str, types: set[str]) -> None:
    described = crd_schema(kind)["properties"]["status"]["properties"]["conditions"]["items"][
        "properties"]["type"]["description"]
    assert all(t in described for t in types)


def documented_examples() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    docs = [yamlio.load(b) for b in blocks]
    return [d for d in docs if isinstance(d, dict)
            and str(d.get("apiVersion", "")).startswith("jobwarden.io/")]


def test_the_documented_examples_parse() -> None:
    examples = documented_examples()
    kinds = [e["kind"] for e in examples]
    assert "JobSchedule" in kinds and "ExclusiveJob" in kinds
    for example in examples:
        if example["kind"] == "JobSchedule" and "podTemplate" in example["spec"]:
            parsed = specs.parse_job_schedule(example["spec"])
            assert parsed.pod_run is not None and parsed.pod_run.dsn_secret == "jobwarden-dsn"
            assert parsed.pod_run.start_deadline_seconds == 600
            assert parsed.successful_history == 3
        elif example["kind"] == "JobSchedule":
            parsed = specs.parse_job_schedule(example["spec"])
            assert parsed.cron == "30 2 * * 1-5" and parsed.timezone == "Europe/Berlin"
            assert dataclasses.asdict(parsed.job)["timeout_seconds"] == 1800
        elif example["kind"] == "ExclusiveJob":
            parsed_job = specs.parse_exclusive_job(example["spec"])
            assert parsed_job.lease_name == "key:search-index-products"
            assert parsed_job.lease_ttl_seconds == 120
