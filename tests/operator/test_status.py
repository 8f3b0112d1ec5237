"""status.py: the decisions behind every status write and Event, without I/O."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from jobwarden.controller.exclusivejobs import status as xst
from jobwarden.controller.jobschedules import status as sst
from jobwarden.controller.kube import status as st
from jobwarden.structs.jobs import JobRecord
from jobwarden.structs.leases import LeaseRecord
from jobwarden.structs.states import JobStatus

T0 = dt.datetime(2026, 6, 1, 2, 30, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)
OURS, THEIRS = "kubernetes:east", "kubernetes:west"


def job(**changes: Any) -> JobRecord:
    base = JobRecord(
        id=42, queue="default", job_class="a:B", data={}, priority=0,
        status=JobStatus.PENDING, run_at=T0, attempts=0, max_retries=3, timeout_seconds=60,
        idempotent=True, unique_key="exclusivejob:u:1", lease_name="key:k", claimed_by=None,
        claimed_at=None, heartbeat_at=None, cancel_requested=False, deferrals=0,
        lease_lost=False, lease_token=None, result=None, last_error=None, schedule_name=None,
        created_at=T0, updated_at=T0, finished_at=None)
    return dataclasses.replace(base, **changes)


def lease(**changes: Any) -> LeaseRecord:
    base = LeaseRecord(name="key:k", slot=0, owner=str(uuid.uuid4()), holder_host="worker-1",
                       token=7, acquired_at=T0, expires_at=T1, expires_in_seconds=30.0)
    return dataclasses.replace(base, **changes)


# -- schedules ----------------------------------------------------------------------------


@pytest.mark.parametrize(("exists", "source", "matches", "action"), [
    (False, None, False, "create"),
    (True, OURS, True, "none"),
    (True, THEIRS, True, "none"),  # same spec from two clusters: one schedule, no rewrite
    (True, OURS, False, "update"),
    (True, THEIRS, False, "conflict"),  # first writer wins, no tug of war
    (True, "code", False, "conflict"),
])
def test_the_schedule_row_is_written_only_when_ours_and_different(
        exists: bool, source: str | None, matches: bool, action: str) -> None:
    assert sst.decide_schedule(row_exists=exists, row_source=source, row_matches=matches,
                               our_source=OURS) == action


def test_an_invalid_spec_only_touches_ready() -> None:
    conditions = sst.schedule_conditions(action=None, error="spec.schedule: bad",
                                         suspended=None, row_name="ns/x", row_source=None,
                                         our_source=OURS)
    assert conditions == [st.Condition(type="Ready", status="False", reason="InvalidSpec",
                                       message="spec.schedule: bad")]


def test_a_conflict_is_not_ready_and_names_the_other_cluster() -> None:
    conditions = {c.type: c for c in sst.schedule_conditions(
        action="conflict", error=None, suspended=False, row_name="ns/x", row_source=THEIRS,
        our_source=OURS)}
    assert conditions["Ready"].status == "False"
    assert conditions["Conflicting"].status == "True"
    assert "'west'" in conditions["Conflicting"].message
    assert conditions["Suspended"].status == "False"


def view(**changes: Any) -> sst.ScheduleView:
    base = sst.ScheduleView(last_slot=T0, next_slot=T1, suspended=False, enqueued=3, skipped=1,
                            missed=2, last_job_id=9, last_job_status="completed",
                            last_job_finished_at=T0 + dt.timedelta(seconds=3), replaced=4,
                            dropped=5, deferred=6)
    return dataclasses.replace(base, **changes)


def test_the_schedule_status_mirrors_the_row() -> None:
    out = sst.schedule_status(previous=None, generation=4, view=view(), now=T0, conditions=[])
    assert out == {
        "observedGeneration": 4, "conditions": [],
        "lastSlot": "2026-06-01T02:30:00Z", "nextRun": "2026-06-01T02:35:00Z",
        "lastJob": {"id": "9", "status": "completed", "finishedAt": "2026-06-01T02:30:03Z"},
        "counts": {"enqueued": 3, "skipped": 1, "missed": 2, "replaced": 4, "dropped": 5,
                   "deferred": 6},
    }


def test_a_suspended_schedule_shows_no_next_run() -> None:
    out = sst.schedule_status(previous={"nextRun": "2026-06-01T02:35:00Z"}, generation=1,
                              view=view(suspended=True), now=T0, conditions=[])
    assert "nextRun" not in out
    assert st.status_patch({"nextRun": "2026-06-01T02:35:00Z"}, out,
                           sst.SCHEDULE_KEYS)["nextRun"] is None


def test_an_invalid_update_keeps_the_mirrored_fields() -> None:
    before = sst.schedule_status(previous=None, generation=1, view=view(), now=T0, conditions=[])
    after = sst.schedule_status(previous=before, generation=2, view=None, now=T1, conditions=[
        st.Condition(type="Ready", status="False", reason="InvalidSpec", message="m")])
    assert after["lastSlot"] == before["lastSlot"] and after["counts"] == before["counts"]
    assert after["observedGeneration"] == 2


# -- conditions and patches ---------------------------------------------------------------


def test_last_transition_time_moves_only_when_the_status_changes() -> None:
    ready = st.Condition(type="Ready", status="True", reason="Synced", message="a")
    first = st.set_conditions(None, [ready], generation=1, now=T0)
    again = st.set_conditions(first, [dataclasses.replace(ready, message="b")], generation=2,
                              now=T1)
    assert again[0]["lastTransitionTime"] == "2026-06-01T02:30:00Z"
    assert again[0]["message"] == "b" and again[0]["observedGeneration"] == 2
    flipped = st.set_conditions(again, [dataclasses.replace(ready, status="False")],
                                generation=2, now=T1)
    assert flipped[0]["lastTransitionTime"] == "2026-06-01T02:35:00Z"


def test_conditions_not_updated_are_kept_in_order() -> None:
    first = st.set_conditions(None, [st.Condition(type="Ready", status="True", reason="r"),
                                     st.Condition(type="Suspended", status="False", reason="r")],
                              generation=1, now=T0)
    later = st.set_conditions(first, [st.Condition(type="Ready", status="False", reason="x")],
                              generation=1, now=T1)
    assert [c["type"] for c in later] == ["Ready", "Suspended"]
    assert later[1] == first[1]


def test_an_unchanged_status_sends_no_patch() -> None:
    desired = sst.schedule_status(previous=None, generation=1, view=view(), now=T0,
                                  conditions=[st.Condition(type="Ready", status="True",
                                                           reason="Synced")])
    assert st.status_patch(desired, desired, sst.SCHEDULE_KEYS) == {}
    again = sst.schedule_status(previous=desired, generation=1, view=view(), now=T1,
                                conditions=[st.Condition(type="Ready", status="True",
                                                         reason="Synced")])
    assert st.status_patch(desired, again, sst.SCHEDULE_KEYS) == {}


def test_a_patch_carries_only_what_changed_and_leaves_foreign_keys_alone() -> None:
    current = {"counts": {"enqueued": 1, "skipped": 0, "missed": 0}, "kopf": {"x": 1}}
    desired = {"counts": {"enqueued": 2, "skipped": 0, "missed": 0}}
    assert st.status_patch(current, desired, sst.SCHEDULE_KEYS) == {
        "counts": {"enqueued": 2, "skipped": 0, "missed": 0}}


# -- events -------------------------------------------------------------------------------


def conds(**statuses: str) -> list[dict[str, Any]]:
    return [{"type": t, "status": s, "reason": "InvalidSpec" if t == "Ready" and s == "False"
             else "r", "message": f"{t} {s}"} for t, s in statuses.items()]


@pytest.mark.parametrize(("before", "after", "reasons"), [
    (None, conds(Ready="True", Conflicting="False", Suspended="False"), []),
    (None, conds(Ready="False"), ["InvalidSpec"]),
    (conds(Ready="False"), conds(Ready="False"), []),  # no repeat while nothing changes
    (conds(Ready="True", Conflicting="False"), conds(Ready="True", Conflicting="True"),
     ["SpecConflict"]),
    (conds(Conflicting="True"), conds(Conflicting="False"), ["ConflictResolved"]),
    (conds(Suspended="False"), conds(Suspended="True"), ["Suspended"]),
    (conds(Suspended="True"), conds(Suspended="False"), ["Resumed"]),
    (conds(Ready="True"), conds(Ready="True", LeaseLost="True"), ["LeaseLost"]),
])
def test_events_mark_transitions_not_states(before: list[dict[str, Any]] | None,
                                            after: list[dict[str, Any]],
                                            reasons: list[str]) -> None:
    assert [e.reason for e in st.condition_events(before, after)] == reasons


def test_a_new_invalid_message_is_a_new_event() -> None:
    before = [{"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "a"}]
    after = [{"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "b"}]
    assert [e.message for e in st.condition_events(before, after)] == ["b"]


# -- exclusive jobs -----------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "phase"), [
    ({}, "Pending"),
    ({"deferrals": 2}, "Deferred"),
    ({"status": JobStatus.PROCESSING, "deferrals": 2}, "Running"),
    ({"status": JobStatus.COMPLETED}, "Succeeded"),
    ({"status": JobStatus.FAILED}, "Failed"),
    ({"status": JobStatus.INTERRUPTED}, "Failed"),
    ({"status": JobStatus.CANCELLED}, "Skipped"),
])
def test_the_phase_follows_the_job_row(changes: dict[str, Any], phase: str) -> None:
    assert xst.exclusive_phase(job(**changes)) == phase


def test_every_job_status_has_a_phase() -> None:
    for status in JobStatus:
        assert xst.exclusive_phase(job(status=status)) in (
            "Pending", "Deferred", "Running", "Succeeded", "Failed", "Skipped")


def test_a_running_job_shows_its_lease_holder_token_and_expiry() -> None:
    out = xst.exclusive_status(
        previous=None, generation=1, now=T0, conditions=[],
        job=job(status=JobStatus.PROCESSING, attempts=1, claimed_at=T0, lease_token=7),
        lease=lease())
    assert out["phase"] == "Running" and out["jobId"] == "42" and out["attempts"] == 1
    assert out["lease"] == {"holder": "worker-1", "token": 7,
                            "expiresAt": "2026-06-01T02:35:00Z"}
    assert out["startedAt"] == "2026-06-01T02:30:00Z" and "finishedAt" not in out


def test_a_finished_job_keeps_its_token_result_and_lease_lost() -> None:
    out = xst.exclusive_status(
        previous=None, generation=1, now=T1, conditions=[],
        job=job(status=JobStatus.COMPLETED, attempts=1, claimed_at=T0, finished_at=T1,
                lease_token=7, lease_lost=True, result={"rows": 3}),
        lease=lease(owner=None, expires_in_seconds=None))
    assert out["lease"] == {"token": 7}
    assert out["leaseLost"] is True and out["result"] == {"rows": 3}
    assert out["finishedAt"] == "2026-06-01T02:35:00Z"


def test_a_lapsed_lease_is_not_shown_as_held() -> None:
    out = xst.exclusive_status(previous=None, generation=1, now=T1, conditions=[],
                               job=job(deferrals=1), lease=lease(expires_in_seconds=-1.0))
    assert "lease" not in out


def test_exclusive_conditions() -> None:
    assert xst.exclusive_conditions(error="spec.job.class: bad", job=None, lease_name=None)[0] \
        .reason == "InvalidSpec"
    ready = xst.exclusive_conditions(error=None, job=job(lease_lost=True), lease_name="key:k")
    assert [(c.type, c.status, c.reason) for c in ready] == [
        ("Ready", "True", "Enqueued"), ("Complete", "False", "Enqueued"),
        ("Failed", "False", "Enqueued"), ("LeaseLost", "True", "LeaseTakenOver")]


def _conditions_of(record: JobRecord) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason)
            for c in xst.exclusive_conditions(error=None, job=record, lease_name="key:k")}


@pytest.mark.parametrize(("changes", "ready", "complete", "failed"), [
    ({"status": JobStatus.PROCESSING}, ("True", "Running"), ("False", "Running"),
     ("False", "Running")),
    ({"deferrals": 2}, ("True", "Deferred"), ("False", "Deferred"), ("False", "Deferred")),
    ({"status": JobStatus.COMPLETED}, ("True", "Succeeded"), ("True", "Succeeded"),
     ("False", "Succeeded")),
    ({"status": JobStatus.FAILED}, ("False", "Failed"), ("False", "Failed"),
     ("True", "JobFailed")),
    ({"status": JobStatus.INTERRUPTED}, ("False", "Failed"), ("False", "Failed"),
     ("True", "Interrupted")),
    # onBusy: skip is normal operation: no page (Ready), yet `wait --for=condition=Failed`
    # returns (the job did not run to success).
    ({"status": JobStatus.CANCELLED}, ("True", "Skipped"), ("False", "Skipped"),
     ("True", "Skipped")),
], ids=["running", "deferred", "succeeded", "failed", "interrupted", "skipped"])
def test_complete_and_failed_are_a_job_s_terminal_conditions(
        changes: dict[str, Any], ready: tuple[str, str], complete: tuple[str, str],
        failed: tuple[str, str]) -> None:
    found = _conditions_of(job(**changes))
    assert (found["Ready"], found["Complete"], found["Failed"]) == (ready, complete, failed)


def test_a_failed_job_s_conditions_carry_its_last_error() -> None:
    record = job(status=JobStatus.FAILED, attempts=4, last_error="ValueError: bad input\n")
    (ready,) = [c for c in xst.exclusive_conditions(error=None, job=record, lease_name="k")
                if c.type == "Failed"]
    assert ready.message == "job 42 failed after 4 attempt(s): ValueError: bad input"


def test_a_resource_expires_ttl_seconds_after_its_job_finished() -> None:
    finished = {"phase": "Succeeded", "finishedAt": "2026-06-01T02:30:00Z"}
    assert not xst.expired(finished, None, T1)
    assert not xst.expired(finished, 301, T1)
    assert xst.expired(finished, 300, T1)
    assert xst.expired(finished, 0, T0)
    assert not xst.expired({"phase": "Running", "finishedAt": "2026-06-01T02:30:00Z"}, 0, T1)
    # A skipped job has no finish time of its own: since Failed became True.
    skipped = {"phase": "Skipped", "conditions": [
        {"type": "Failed", "status": "True", "lastTransitionTime": "2026-06-01T02:34:00Z"}]}
    assert not xst.expired(skipped, 61, T1) and xst.expired(skipped, 60, T1)


@pytest.mark.parametrize(("before", "after", "expected"), [
    (None, "Pending", None),
    ("Pending", "Pending", None),
    ("Pending", "Deferred", ("Normal", "Deferred")),
    ("Running", "Failed", ("Warning", "Failed")),
    ("Running", "Succeeded", ("Normal", "Succeeded")),
])
def test_a_phase_change_is_an_event(before: str | None, after: str,
                                    expected: tuple[str, str] | None) -> None:
    event = xst.phase_event(before, after, job_id="42")
    assert (None if event is None else (event.type, event.reason)) == expected
