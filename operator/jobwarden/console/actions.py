"""The console's actions (POST only, CSRF-checked by the caller, refused when read-only).

Each returns where to go next (Post/Redirect/Get, with a notice) or, for the
confirmation step of a bulk action, a page to render. A bulk action first
renders the count of jobs it would change; only a second POST with
``confirm=yes`` does it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from jobwarden.console.pages import Action, Context, filter_from, filter_query, with_notice
from jobwarden.structs.states import JobStatus

#: The dry run of a bulk action counts at most this many jobs (bounded work).
BULK_COUNT_CAP = 1_000_000


def _job_id(form: Mapping[str, str]) -> int:
    text = form.get("job_id", "")
    if not text.isdigit():
        raise ValueError("a job id is required")
    return int(text)


def _name(form: Mapping[str, str], field: str) -> str:
    value = form.get(field, "")
    if not 1 <= len(value) <= 320:
        raise ValueError(f"a {field} is required")
    return value


def retry_job(ctx: Context, form: Mapping[str, str]) -> str:
    job_id = _job_id(form)
    done = ctx.client.retry(job_id)
    return with_notice(f"/jobs/{job_id}",
                       "will run again" if done else "not retried: only finished, "
                       "unsuccessful jobs can be retried")


def cancel_job(ctx: Context, form: Mapping[str, str]) -> str:
    job_id = _job_id(form)
    status = ctx.client.cancel(job_id)
    notice = {JobStatus.CANCELLED: "cancelled",
              JobStatus.PROCESSING: "running: asked it to stop"}.get(status,
                                                                     f"left as {status.value}")
    return with_notice(f"/jobs/{job_id}", notice)


def pause_queue(ctx: Context, form: Mapping[str, str]) -> str:
    queue = _name(form, "queue")
    ctx.client.pause_queue(queue, by="console")
    return with_notice("/queues", f"paused {queue}")


def resume_queue(ctx: Context, form: Mapping[str, str]) -> str:
    queue = _name(form, "queue")
    resumed = ctx.client.resume_queue(queue)
    return with_notice("/queues", f"resumed {queue}" if resumed else f"{queue} was not paused")


def drain_host(ctx: Context, form: Mapping[str, str]) -> str:
    host = _name(form, "host")
    ctx.client.hosts.drain(host=host, reason="console")
    return with_notice("/hosts", f"draining {host}")


def resume_host(ctx: Context, form: Mapping[str, str]) -> str:
    host = _name(form, "host")
    ctx.client.hosts.resume(host=host)
    return with_notice("/hosts", f"resumed {host}")


def suspend_schedule(ctx: Context, form: Mapping[str, str]) -> str:
    name = _name(form, "schedule")
    found = ctx.client.schedules.suspend(name)
    return with_notice("/schedules", f"suspended {name}" if found else f"no schedule {name}")


def resume_schedule(ctx: Context, form: Mapping[str, str]) -> str:
    name = _name(form, "schedule")
    found = ctx.client.schedules.resume(name)
    return with_notice("/schedules", f"resumed {name}" if found else f"no schedule {name}")


def run_schedule_now(ctx: Context, form: Mapping[str, str]) -> str:
    """``jobwarden schedules run-now``: one run outside the slots (the same store call)."""
    name = _name(form, "schedule")
    back = "/schedules/" + urllib.parse.quote(name, safe="/")
    if ctx.client.schedules.get(name) is None:
        return with_notice("/schedules", f"no schedule {name}")
    run = ctx.client.schedules.run_now(name)
    return with_notice(back, f"run-now enqueued job {run.job_id}")


_VERB = {"retry": "retried", "cancel": "cancelled (running ones asked to stop)",
         "purge": "purged"}


def bulk(ctx: Context, form: Mapping[str, str]) -> str | tuple[str, dict[str, Any]]:
    action = form.get("action", "")
    if action not in _VERB:
        raise ValueError("choose retry, cancel or purge")
    where = filter_from(form, ctx.client.db.now())
    query = filter_query(form)
    back = "/jobs?" + urllib.parse.urlencode(query)
    if form.get("confirm") != "yes":
        dry = ctx.client.bulk(action, where, dry_run=True, count_cap=BULK_COUNT_CAP)
        return "confirm.html", {"title": "Confirm", "action": action, "count": dry.count,
                                "capped": dry.count >= BULK_COUNT_CAP, "query": query,
                                "back": back, "verb": _VERB[action]}
    done = ctx.client.bulk(action, where)
    return with_notice(back, f"{done.count} job(s) {_VERB[action]}")


ACTIONS: dict[str, Action] = {
    "retry": retry_job, "cancel": cancel_job, "pause-queue": pause_queue,
    "resume-queue": resume_queue, "drain-host": drain_host, "resume-host": resume_host,
    "suspend-schedule": suspend_schedule, "resume-schedule": resume_schedule,
    "run-schedule-now": run_schedule_now, "bulk": bulk,
}
