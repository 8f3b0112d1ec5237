"""A runner pass's decision for one due schedule, as a specification (no database).

Given a due schedule (its expression, planning point, catch-up and overlap
settings, the status of its previous run) and the pass's clock, the decision
says which slots run (one job row each: unique key, lease, ``on_busy``), which
are skipped by the overlap policy or missed by the catch-up rule, which
previous run ``Replace`` cancels, and what is written back. The database tests
(tests/schedules/test_runner.py) prove the runner carries these out.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from jobwarden import schedules
from jobwarden.jobs import definitions
from jobwarden.schedules import decisions, slots
from jobwarden.structs.policies import Overlap
from jobwarden.structs.schedules import (
    SLOT_HISTORY,
    SLOT_PRUNE_MARGIN,
    Advance,
    AdvanceColumns,
    DueSchedule,
    FateColumns,
    FateRow,
    JobRow,
)

HOURLY = "CRON_TZ=UTC 0 * * * *"


def at(hh: int, mm: int = 0) -> dt.datetime:
    return dt.datetime(2030, 1, 7, hh, mm, tzinfo=dt.UTC)


def due(**fields: Any) -> DueSchedule:
    """An hourly schedule last planned at 00:30, catch-up latest, overlap Allow."""
    values: dict[str, Any] = {
        "name": "hourly", "expression": HOURLY, "job_class": "app:Report", "data": "{}",
        "queue": None, "priority": None, "timeout_seconds": None, "max_retries": None,
        "idempotent": None, "catch_up": "latest", "catch_up_window_seconds": 86400,
        "catch_up_max": 10, "overlap": "Allow", "planned_until": at(0, 30),
        "last_job_id": None, "last_job_status": None, "next_slot": at(1),
        "ctid": "(0,1)", "slot_rows": 0, "job_id": 41,
    }
    values.update(fields)
    return DueSchedule(**values)


def decide(schedule: DueSchedule, now: dt.datetime) -> decisions.ScheduleDecision:
    expr = schedules.parse_stored(schedule.expression)
    plan = schedules.plan_due(
        expr, last_slot=schedule.planned_until, now=now, catch_up=schedule.catch_up,
        window_seconds=schedule.catch_up_window_seconds, catch_up_max=schedule.catch_up_max)
    return decisions.decide(schedule, plan, expr, at=now)


def hours(slots_: Any) -> list[int]:
    return [slot.hour for slot in slots_]


# -- slots and their jobs ---------------------------------------------------------------


def test_the_one_due_slot_runs_as_one_job_keyed_by_name_and_utc_slot() -> None:
    decision = decide(due(), at(1, 0))
    assert hours(decision.run) == [1]
    assert (decision.skipped, decision.missed_slots, decision.missed) == ((), [], 0)
    base = definitions.Job
    assert decision.jobs == [JobRow(
        queue=base.queue, job_class="app:Report", data="{}", priority=base.priority,
        max_retries=base.max_retries, timeout_seconds=float(base.timeout),
        idempotent=base.idempotent, unique_key="hourly:2030-01-07T01:00:00Z",
        lease_name=None, schedule_name="hourly", on_busy=None, pod_run=None, id=41)]
    assert decision.replace_job is None


def test_a_schedule_s_own_job_options_and_pod_run_go_onto_every_job() -> None:
    decision = decide(due(queue="reports", priority=7, timeout_seconds=9.5, max_retries=0,
                          idempotent=False, pod_run="JobSchedule/ns/hourly",
                          catch_up="all"), at(3, 0))
    assert {(j.queue, j.priority, j.timeout_seconds, j.max_retries, j.idempotent, j.pod_run)
            for j in decision.jobs} == {("reports", 7, 9.5, 0, False, "JobSchedule/ns/hourly")}


def test_only_the_first_slot_s_job_takes_the_id_the_claim_drew() -> None:
    decision = decide(due(catch_up="all"), at(3, 10))
    assert hours(decision.run) == [1, 2, 3]
    assert [job.id for job in decision.jobs] == [41, None, None]
    assert [job.unique_key for job in decision.jobs] == [
        "hourly:2030-01-07T01:00:00Z", "hourly:2030-01-07T02:00:00Z",
        "hourly:2030-01-07T03:00:00Z"]


def test_nothing_due_decides_nothing_but_the_next_slot() -> None:
    decision = decide(due(), at(0, 45))
    assert (decision.run, decision.skipped, decision.missed, decision.jobs) == ([], (), 0, [])
    assert decision.fated is None
    assert decision.next_slot == at(1)


# -- catch-up --------------------------------------------------------------------------


def test_catch_up_latest_runs_the_newest_slot_and_records_the_rest_missed() -> None:
    decision = decide(due(catch_up="latest"), at(4, 5))
    assert hours(decision.run) == [4]
    assert decision.missed == 3
    assert hours(decision.missed_slots) == [3, 2, 1]  # newest first, as the walk finds them
    assert decision.fated == at(4)
    assert decision.planned_until == at(4, 5)


def test_catch_up_none_runs_nothing_late_and_its_newest_fate_is_the_newest_missed_slot(
) -> None:
    decision = decide(due(catch_up="none"), at(4, 5))
    assert decision.run == []
    assert decision.missed == 4
    assert decision.fated == at(4)


def test_the_recorded_missed_slots_are_bounded_by_the_history() -> None:
    schedule = due(planned_until=at(0, 30) - dt.timedelta(days=30), catch_up="none")
    decision = decide(schedule, at(4, 5))
    assert len(decision.missed_slots) == SLOT_HISTORY
    assert decision.missed > SLOT_HISTORY


# -- overlap ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "previous", "run", "skipped", "replace_job"),
    [
        ("Allow", "processing", [1, 2, 3], [], None),
        ("Forbid", None, [1], [2, 3], None),  # the oldest runs; the later ones would overlap it
        ("Forbid", "completed", [1], [2, 3], None),
        ("Forbid", "pending", [], [1, 2, 3], None),  # the previous run is still due to run
        ("Forbid", "processing", [], [1, 2, 3], None),
        ("Replace", None, [3], [1, 2], None),  # the newest runs; the older ones replaced
        ("Replace", "failed", [3], [1, 2], None),
        ("Replace", "pending", [3], [1, 2], 7),  # ... and the previous run is cancelled
        ("Replace", "processing", [3], [1, 2], 7),
    ],
)
def test_the_overlap_policy_splits_the_runnable_slots(
    overlap: Overlap, previous: str | None, run: list[int], skipped: list[int],
    replace_job: int | None,
) -> None:
    schedule = due(catch_up="all", overlap=overlap, last_job_status=previous,
                   last_job_id=7 if previous else None)
    decision = decide(schedule, at(3, 10))
    assert (hours(decision.run), hours(decision.skipped)) == (run, skipped)
    assert decision.replace_job == replace_job
    assert len(decision.jobs) == len(run)


def test_replace_with_nothing_to_run_cancels_nothing() -> None:
    decision = decide(due(overlap="Replace", last_job_status="processing", last_job_id=7),
                      at(0, 45))
    assert decision.replace_job is None


@pytest.mark.parametrize(
    ("overlap", "lease", "on_busy"),
    [
        ("Allow", None, None),
        # A Forbid run that finds the previous one holding the lease is dropped ...
        ("Forbid", slots.schedule_lease("hourly"), "skip"),
        # ... a Replace run waits until the old one stopped.
        ("Replace", slots.schedule_lease("hourly"), "defer"),
    ],
)
def test_forbid_and_replace_runs_carry_the_schedule_s_lease_and_their_on_busy(
    overlap: Overlap, lease: str | None, on_busy: str | None,
) -> None:
    (job,) = decide(due(overlap=overlap), at(1, 0)).jobs
    assert (job.lease_name, job.on_busy) == (lease, on_busy)


def test_by_overlap_keeps_an_empty_plan_empty_whatever_the_policy() -> None:
    for overlap in ("Allow", "Forbid", "Replace"):
        assert decisions.by_overlap([], overlap, previous_active=True) == ([], ())


# -- what is written back --------------------------------------------------------------


def test_every_slot_gets_one_fate_enqueued_then_skipped_then_missed() -> None:
    schedule = due(catch_up="all", catch_up_window_seconds=2 * 3600, overlap="Forbid")
    decision = decide(schedule, at(4, 10))
    assert decision.fates() == [
        FateRow("hourly", at(3), "enqueued", "hourly:2030-01-07T03:00:00Z", 41),
        FateRow("hourly", at(4), "skipped", None, None),
        FateRow("hourly", at(2), "missed", None, None),
        FateRow("hourly", at(1), "missed", None, None),
    ]


def test_the_write_back_counts_the_fates_and_names_the_newest_job() -> None:
    schedule = due(catch_up="all", overlap="Replace", last_job_status="pending",
                   last_job_id=7, slot_rows=3)
    advance = decide(schedule, at(3, 10)).advance(replaced=1)
    assert (advance.planned_until, advance.last_slot, advance.last_enqueued_slot,
            advance.next_slot) == (at(3, 10), at(3), at(3), at(4))
    assert (advance.enqueued, advance.skipped, advance.missed, advance.replaced) == (1, 2, 0, 1)
    assert (advance.last_key, advance.last_job_id) == ("hourly:2030-01-07T03:00:00Z", 41)
    assert (advance.error, advance.slot_rows, advance.ctid) == (None, 6, "(0,1)")


@pytest.mark.parametrize(
    ("rows", "added", "after"),
    [
        (0, 1, (1, False)),
        (SLOT_HISTORY + SLOT_PRUNE_MARGIN - 1, 1, (SLOT_HISTORY + SLOT_PRUNE_MARGIN, False)),
        (SLOT_HISTORY + SLOT_PRUNE_MARGIN, 1, (SLOT_HISTORY, True)),  # past the margin: pruned
    ],
)
def test_the_history_is_pruned_back_to_its_bound_once_past_the_margin(
    rows: int, added: int, after: tuple[int, bool],
) -> None:
    assert decisions.history_rows(rows, added=added) == after


def test_a_shared_plan_is_never_changed_by_a_decision() -> None:
    expr = schedules.parse_stored(HOURLY)
    plan = schedules.plan_due(expr, last_slot=at(0, 30), now=at(3, 10), catch_up="all",
                              window_seconds=86400, catch_up_max=10)
    before = list(plan.run)
    for overlap in ("Forbid", "Replace", "Allow"):
        decisions.decide(due(overlap=overlap, catch_up="all"), plan, expr, at=at(3, 10))
    assert plan.run == before


def test_the_write_back_s_columns_are_its_rows_fields_in_order() -> None:
    # The pass appends to the columns and the statements read them by the rows' names.
    assert [f.name for f in dataclasses.fields(AdvanceColumns)] == list(Advance._fields)
    assert [f.name for f in dataclasses.fields(FateColumns)] == list(FateRow._fields)
