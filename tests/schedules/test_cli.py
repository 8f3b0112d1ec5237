"""``jobwarden schedules ...`` as users run it: real processes, --json output, exit codes."""

from __future__ import annotations

import datetime as dt
import json

from jobwarden.api.client import Client
from tests.cli.test_cli import jw

JOB = "tests.support.schedulejobs:Tick"


def test_set_list_show_next_suspend_resume_and_delete(dsn: str, client: Client) -> None:
    made = jw("schedules", "set", "report", "--cron", "30 2 * * *", "--timezone",
              "Europe/Berlin", "--job", JOB, "--data", '{"k": 1}', "--overlap", "Forbid",
              "--json", dsn=dsn)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["source"] == "cli"

    listed = json.loads(jw("schedules", "list", "--json", dsn=dsn).stdout)
    assert [(r["name"], r["cron"], r["overlap"], r["data"]) for r in listed] == [
        ("report", "30 2 * * *", "Forbid", {"k": 1})]
    table = jw("schedules", "list", dsn=dsn).stdout
    assert "report" in table and "30 2 * * * (Europe/Berlin)" in table

    upcoming = json.loads(jw("schedules", "next", "report", "-n", "3", "--json", dsn=dsn).stdout)
    assert len(upcoming["next"]) == 3
    for item in upcoming["next"]:
        local = dt.datetime.fromisoformat(item["local"])
        assert (local.hour, local.minute) == (2, 30)  # in the schedule's zone
        assert dt.datetime.fromisoformat(item["utc"].replace("Z", "+00:00")) == local
    assert "UTC" in jw("schedules", "next", "report", dsn=dsn).stdout

    suspended = json.loads(jw("schedules", "suspend", "report", "--json", dsn=dsn).stdout)
    assert (suspended["suspended"], suspended["suspended_by"]) == (True, "manual")
    resumed = json.loads(jw("schedules", "resume", "report", "--json", dsn=dsn).stdout)
    assert resumed["suspended"] is False

    assert json.loads(jw("schedules", "delete", "report", "--json", dsn=dsn).stdout) == {
        "name": "report", "deleted": True}
    assert client.schedules.list() == []


def test_enqueue_due_and_backfill_enqueue_each_slot_once(dsn: str, client: Client) -> None:
    now = client.db.now()
    client.schedules.upsert("sync", interval="1m", job_class=JOB,
                            now=now - dt.timedelta(minutes=3))

    due = jw("schedules", "enqueue-due", "--json", dsn=dsn)
    assert due.returncode == 0, due.stderr
    report = json.loads(due.stdout)
    assert (report["checked"], report["enqueued"], report["errors"]) == (1, 1, 0)

    start = (now - dt.timedelta(minutes=10)).replace(second=0, microsecond=0)
    # After the runner ran: the slot it enqueued (the latest at its own clock, which
    # a slow start can put past a minute boundary after `now`) lies in the range.
    end = client.db.now()
    first = jw("schedules", "backfill", "sync", "--from", start.isoformat(), "--to",
               end.isoformat(), "--json", dsn=dsn)
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    assert len(done["slots"]) >= 10  # one a minute from start; more if the clock moved on
    assert done["duplicates"] == 1  # the slot the runner enqueued
    assert done["enqueued"] == len(done["slots"]) - 1
    again = json.loads(jw("schedules", "backfill", "sync", "--from", start.isoformat(), "--to",
                          end.isoformat(), "--json", dsn=dsn).stdout)
    assert (again["enqueued"], again["duplicates"]) == (0, len(done["slots"]))
    keys = [j.unique_key for j in client.jobs(limit=100)]
    assert len(keys) == len(set(keys)) == len(done["slots"])


def test_bad_input_gets_a_clear_message_and_its_exit_code(dsn: str, client: Client) -> None:
    cases = [
        (("schedules", "set", "x", "--cron", "*/5 * * * * *", "--job", JOB), 7, "seconds"),
        (("schedules", "set", "x", "--cron", "@daily", "--timezone", "Nowhere/City", "--job",
          JOB), 7, "Nowhere/City"),
        (("schedules", "show", "missing"), 6, "no schedule named 'missing'"),
        (("schedules", "backfill", "missing", "--from", "2030-01-01T00:00:00",
          "--to", "2030-01-02T00:00:00Z"), 2, "no UTC offset"),
    ]
    for args, code, message in cases:
        out = jw(*args, dsn=dsn)
        assert (out.returncode, message in out.stderr) == (code, True), (args, out.stderr)
        assert "Traceback" not in out.stderr
    client.schedules.upsert("future", interval="1m", job_class=JOB)
    out = jw("schedules", "backfill", "future", "--from", "2020-01-01T00:00:00Z", "--to",
             "2999-01-01T00:00:00Z", dsn=dsn)
    assert out.returncode == 7 and "future" in out.stderr
    assert [r.name for r in client.schedules.list()] == ["future"]


def test_run_now_enqueues_one_job_outside_the_slots_and_a_request_id_only_once(
        dsn: str, client: Client) -> None:
    client.schedules.upsert("nightly", cron="0 3 * * *", job_class=JOB, overlap="Forbid")
    before = client.schedules.get("nightly")
    assert before is not None
    first = jw("schedules", "run-now", "nightly", "--json", dsn=dsn)
    assert first.returncode == 0, first.stderr
    job_id = json.loads(first.stdout)["job_id"]
    job = client.job(job_id)
    assert job.status == "pending" and job.job_class == JOB
    assert job.schedule_name == "nightly"
    other = json.loads(jw("schedules", "run-now", "nightly", "--json", dsn=dsn).stdout)
    assert other["job_id"] != job_id  # no request id: every call is a new run
    once = json.loads(jw("schedules", "run-now", "nightly", "--request", "r1", "--json",
                         dsn=dsn).stdout)
    again = json.loads(jw("schedules", "run-now", "nightly", "--request", "r1", "--json",
                          dsn=dsn).stdout)
    assert again == {**once, "duplicate": True}
    after = client.schedules.get("nightly")
    assert after is not None  # the slots are untouched
    assert (after.next_slot, after.enqueued_count) == (before.next_slot, before.enqueued_count)
    missing = jw("schedules", "run-now", "nope", dsn=dsn)
    assert missing.returncode != 0 and "nope" in missing.stderr


def test_slots_lists_the_last_slots_with_their_fate(dsn: str, client: Client) -> None:
    t0 = dt.datetime(2030, 1, 7, 12, 0, 30, tzinfo=dt.UTC)
    client.schedules.upsert("fated", interval="1m", job_class=JOB, overlap="Forbid",
                            catch_up="all", catch_up_max=2, now=t0)
    client.schedules.enqueue_due(now=t0 + dt.timedelta(minutes=4))
    out = jw("schedules", "slots", "fated", "--json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["counts"] == {"enqueued": 1, "skipped": 1, "missed": 2, "replaced": 0,
                               "dropped": 0, "deferred": 0}
    assert [(s["slot"][11:16], s["fate"]) for s in shown["slots"]] == [
        ("12:04", "skipped"), ("12:03", "enqueued"), ("12:02", "missed"), ("12:01", "missed")]
    assert shown["slots"][1]["job_id"] is not None
    assert shown["slots"][1]["job_status"] == "pending"
    table = jw("schedules", "slots", "fated", "-n", "2", dsn=dsn).stdout
    assert "fates: enqueued 1, skipped 1, missed 2, replaced 0" in table
    assert "skipped" in table and "missed" not in table.split("\n", 1)[1]
    missing = jw("schedules", "slots", "nope", dsn=dsn)
    assert missing.returncode == 6 and "nope" in missing.stderr
