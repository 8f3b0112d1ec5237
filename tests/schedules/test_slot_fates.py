"""Every schedule slot's fate, recorded once: counts on the row, a bounded history, one metric.

The runner decides enqueued, skipped and missed; replaced (a Replace slot
cancelled the run), dropped (a Forbid run found the schedule's lease busy) and
deferred (a run found its lease busy and waits) happen to an enqueued slot
later. Each is counted on the schedule row and marked in its slot history by
the statement or transaction that decided it, and the gauge-lease holder
exports the counts as ``jobwarden_schedule_slots_total{schedule, fate}``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import psycopg

from jobwarden.api.client import Client
from jobwarden.db.database import Database
from jobwarden.maintenance import gauges
from jobwarden.observability import metrics
from jobwarden.schedules import runner
from jobwarden.structs.schedules import SLOT_FATES
from jobwarden.structs.states import JobStatus
from jobwarden.worker.worker import Worker
from tests.support.waiting import wait_for

T0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
JOB = "tests.support.schedulejobs:Tick"


def at(hours: int = 0, minutes: int = 0, seconds: int = 0) -> dt.datetime:
    return dt.datetime(2030, 1, 7, hours, minutes, seconds, tzinfo=dt.UTC)


def history(client: Client, name: str) -> list[tuple[str, str]]:
    """(slot HH:MM, fate), newest first."""
    return [(f.slot.astimezone(dt.UTC).strftime("%H:%M"), f.fate)
            for f in client.db.schedules.slots(name, limit=100)]


def counts(client: Client, name: str) -> dict[str, int]:
    record = client.schedules.get(name)
    assert record is not None
    return {fate: n for fate, n in record.fate_counts().items() if n}


def test_the_runner_records_enqueued_skipped_and_missed_slots(client: Client) -> None:
    client.schedules.upsert("forbid", interval="1m", job_class=JOB, overlap="Forbid",
                            catch_up="all", catch_up_max=2, now=T0)
    client.schedules.enqueue_due(now=at(12, 4, 1))  # 12:01..12:04: two too old, 12:03 runs
    assert history(client, "forbid") == [("12:04", "skipped"), ("12:03", "enqueued"),
                                         ("12:02", "missed"), ("12:01", "missed")]
    assert counts(client, "forbid") == {"enqueued": 1, "skipped": 1, "missed": 2}
    [enqueued] = [f for f in client.db.schedules.slots("forbid") if f.fate == "enqueued"]
    job = client.job(enqueued.job_id or 0)
    assert job.unique_key == "forbid:2030-01-07T12:03:00Z" and enqueued.job_status == "pending"
    client.schedules.enqueue_due(now=at(12, 5, 1))  # the run is still pending: skipped
    assert history(client, "forbid")[0] == ("12:05", "skipped")
    assert counts(client, "forbid") == {"enqueued": 1, "skipped": 2, "missed": 2}


def test_replace_marks_the_previous_slot_replaced(client: Client) -> None:
    client.schedules.upsert("replace", interval="1m", job_class=JOB, overlap="Replace", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    client.schedules.enqueue_due(now=at(12, 2, 1))
    assert history(client, "replace") == [("12:02", "enqueued"), ("12:01", "replaced")]
    assert counts(client, "replace") == {"enqueued": 2, "replaced": 1}
    replaced = client.db.schedules.slots("replace")[1]
    assert replaced.job_status == "cancelled"
    # The operator's status mirror carries every fate's count.
    from jobwarden.controller.jobschedules import reconciler as controller_schedules
    record = client.schedules.get("replace")
    assert record is not None
    view = controller_schedules.view_of(record)
    assert (view.enqueued, view.replaced, view.dropped, view.deferred) == (2, 1, 0, 0)


def test_a_dropped_and_a_deferred_run_are_its_slots_fate_once(client: Client,
                                                              db: Database) -> None:
    client.schedules.upsert("dropper", interval="1m", job_class=JOB, overlap="Forbid", now=T0)
    client.schedules.upsert("waiter", interval="1m", job_class=JOB, overlap="Replace", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    claims = {c.id: c for c in db.jobs.claim(host="test", limit=10, grace_seconds=60)}
    by_schedule = {client.job(i).schedule_name: c for i, c in claims.items()}
    dropped, waiting = by_schedule["dropper"], by_schedule["waiter"]
    # What the worker writes when the schedule's lease is busy (exclusive.py):
    assert db.jobs.mark_cancelled(job_id=dropped.id, claim_token=dropped.claim_token,
                                  error="skipped: lease busy", dropped=True)
    assert db.jobs.release(job_id=waiting.id, claim_token=waiting.claim_token,
                           delay_seconds=0, deferral=True)
    assert history(client, "dropper") == [("12:01", "dropped")]
    assert history(client, "waiter") == [("12:01", "deferred")]
    assert counts(client, "dropper") == {"enqueued": 1, "dropped": 1}
    assert counts(client, "waiter") == {"enqueued": 1, "deferred": 1}
    # Deferred again: still one fate for the slot.
    [again] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert again.id == waiting.id
    assert db.jobs.release(job_id=again.id, claim_token=again.claim_token, delay_seconds=0,
                           deferral=True)
    assert counts(client, "waiter") == {"enqueued": 1, "deferred": 1}
    # A shutdown give-back (not a deferral) and a plain cancellation are no fate.
    [back] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert db.jobs.release(job_id=back.id, claim_token=back.claim_token, deferral=False)
    [last] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert db.jobs.mark_cancelled(job_id=last.id, claim_token=last.claim_token,
                                  error="cancelled: asked")
    assert counts(client, "waiter") == {"enqueued": 1, "deferred": 1}
    assert client.job(last.id).status is JobStatus.CANCELLED


def test_a_run_now_is_not_a_slot(client: Client, db: Database) -> None:
    client.schedules.upsert("manual", interval="1m", job_class=JOB, overlap="Forbid", now=T0)
    run = client.schedules.run_now("manual")
    [claim] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    assert claim.id == run.job_id
    assert db.jobs.release(job_id=claim.id, claim_token=claim.claim_token, deferral=True)
    assert counts(client, "manual") == {} and history(client, "manual") == []


def test_the_history_is_bounded_and_a_long_outage_costs_no_more(client: Client) -> None:
    client.schedules.upsert("busy", interval="1s", job_class=JOB, catch_up="none", now=T0)
    client.schedules.enqueue_due(now=T0 + dt.timedelta(hours=2))  # 7,200 slots passed
    record = client.schedules.get("busy")
    assert record is not None and record.missed_count + record.enqueued_count == 7200
    kept = client.db.schedules.slots("busy", limit=1000)
    assert len(kept) == runner.SLOT_HISTORY
    assert [f.slot for f in kept] == sorted((f.slot for f in kept), reverse=True)
    assert kept[0].slot == T0 + dt.timedelta(hours=2) - dt.timedelta(seconds=1) or \
        kept[0].fate == "enqueued"
    for step in range(1, 4):  # later passes add slots and prune to the bound
        client.schedules.enqueue_due(now=T0 + dt.timedelta(hours=2, seconds=10 * step))
        assert len(client.db.schedules.slots("busy", limit=1000)) == runner.SLOT_HISTORY
    client.schedules.delete("busy")
    assert client.db.schedules.slots("busy") == []


def stored_history(db: Database, name: str) -> tuple[int, int]:
    """(rows in schedule_slots, the row's slot_rows): what readers never see."""
    with psycopg.connect(db.dsn) as conn:
        rows = conn.execute("SELECT count(*) FROM jobwarden.schedule_slots "
                            "WHERE schedule_name = %s", (name,)).fetchone()
        bound = conn.execute("SELECT slot_rows FROM jobwarden.schedules WHERE name = %s",
                             (name,)).fetchone()
    assert rows is not None and bound is not None
    return int(rows[0]), int(bound[0])


def test_the_stored_history_is_pruned_once_past_the_bound_and_its_margin(
        client: Client, db: Database) -> None:
    """The pass prunes a schedule's history only when its count passes the bound plus
    the margin, then back to the bound: the table stays bounded, the count never
    under-states the rows, and readers see the newest SLOT_HISTORY slots throughout."""
    client.schedules.upsert("tick", interval="1s", job_class=JOB, now=T0)
    ceiling = runner.SLOT_HISTORY + runner.SLOT_PRUNE_MARGIN
    pruned = 0
    previous = 0
    for step in range(1, ceiling + runner.SLOT_PRUNE_MARGIN + 3):  # one slot a pass
        when = T0 + dt.timedelta(seconds=step)
        client.schedules.enqueue_due(now=when)
        rows, bound = stored_history(db, "tick")
        assert rows <= bound <= ceiling
        pruned += rows < previous
        previous = rows
        shown = client.db.schedules.slots("tick", limit=1000)
        assert len(shown) == min(step, runner.SLOT_HISTORY)
        assert shown[0].slot == when.replace(microsecond=0)
    assert pruned == 2  # at ceiling + 1 and again SLOT_PRUNE_MARGIN + 1 passes later
    assert stored_history(db, "tick") == (runner.SLOT_HISTORY, runner.SLOT_HISTORY)


def test_the_gauge_holder_exports_every_fate_from_the_counts(client: Client,
                                                             db: Database) -> None:
    client.schedules.upsert("exported", interval="1m", job_class=JOB, overlap="Replace",
                            now=T0)
    exported = gauges.DatabaseGauges(db)
    exported()

    def sample(fate: str) -> float | None:
        return metrics.REGISTRY.get_sample_value("jobwarden_schedule_slots_total",
                                                 {"schedule": "exported", "fate": fate})

    assert {fate: sample(fate) for fate in SLOT_FATES} == dict.fromkeys(SLOT_FATES, 0.0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    client.schedules.enqueue_due(now=at(12, 2, 1))
    exported()
    assert (sample("enqueued"), sample("replaced"), sample("skipped")) == (2.0, 1.0, 0.0)
    exported.clear()
    assert sample("enqueued") is None


def test_a_worker_drops_a_forbid_run_whose_lease_is_busy(
        client: Client, start_worker: Callable[..., Worker]) -> None:
    client.schedules.upsert("held", interval="1m", job_class=JOB, overlap="Forbid",
                            now=client.db.now() - dt.timedelta(minutes=2))
    with client.lease("schedule:held", ttl=120):  # the previous run still holds it
        assert client.schedules.enqueue_due().enqueued == 1
        start_worker(apps=("tests.support.schedulejobs",), schedule_check_seconds=0)
        wait_for(lambda: counts(client, "held").get("dropped") == 1, timeout=30,
                 message="the run dropped on the busy lease")
    # The newest slot ran (and was dropped); the one before it was missed (catch-up latest).
    assert [fate for _, fate in history(client, "held")] == ["dropped", "missed"]


def test_a_deferral_marks_only_a_slot_still_enqueued_and_moves_only_its_own_count(
        client: Client, db: Database) -> None:
    """job_cancelled and job_release share one fate-keyed CTE (fragment_slot_fate): each
    fate moves its own count, and a deferral never overwrites a slot's later fate."""
    client.schedules.upsert("swap", interval="1m", job_class=JOB, overlap="Replace", now=T0)
    client.schedules.enqueue_due(now=at(12, 1, 1))
    [claim] = db.jobs.claim(host="test", limit=1, grace_seconds=60)
    client.schedules.enqueue_due(now=at(12, 2, 1))  # the running run is asked to stop
    assert history(client, "swap") == [("12:02", "enqueued"), ("12:01", "replaced")]
    assert db.jobs.release(job_id=claim.id, claim_token=claim.claim_token, deferral=True)
    assert counts(client, "swap") == {"enqueued": 2, "replaced": 1, "deferred": 1}
    assert history(client, "swap") == [("12:02", "enqueued"), ("12:01", "replaced")]
