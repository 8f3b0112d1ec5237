"""The console's actions (POST only, CSRF-checked by the caller, refused when read-only).

Each returns where to go next (Post/Redirect/Get, with a notice) or, for the
confirmation step of a bulk action, a page to render. A bulk action first
renders the count of jobs it would change; only a second POST with
``confirm=yes`` does it.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from jobwarden import textrules
from jobwarden.console.pages import (
    Action,
    Context,
    NotFound,
    filter_from,
    filter_query,
    parse_job_id,
    with_notice,
)
from jobwarden.structs.leases import MAX_NAME_LENGTH
from jobwarden.structs.states import TERMINAL, JobStatus

#: Destructive actions (a lease cleared, a job deleted) are logged here, by what
#: they changed, next to the access log line of their POST.
logger = logging.getLogger("jobwarden.console")

#: The dry run of a bulk action counts at most this many jobs (bounded work).
BULK_COUNT_CAP = 1_000_000


def _job_id(form: Mapping[str, str]) -> int:
    text = form.get("job_id", "")
    if not text:
        raise ValueError("a job id is required")
    return parse_job_id(text)


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
    """As ``jobwarden drain --host``: an unknown host is "not found" (404), nothing stored."""
    host = _name(form, "host")
    if not ctx.client.hosts.drain(host=host, reason="console"):
        raise NotFound(f"no registered host named {host!r}")
    return with_notice("/hosts", f"draining {host}")


def resume_host(ctx: Context, form: Mapping[str, str]) -> str:
    host = _name(form, "host")
    if not ctx.client.hosts.resume(host=host):
        raise NotFound(f"no registered host named {host!r}")
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


# -- delete one job, clear one lease (each confirmed on a page first) ---------------

#: What a finished job is, for the "why not" of a refused delete.
FINISHED = ", ".join(sorted(s.value for s in TERMINAL))


def delete_job(ctx: Context, form: Mapping[str, str]) -> str | tuple[str, dict[str, Any]]:
    """Delete one finished job: a confirmation page, then (``confirm=yes``) the delete,
    fenced in its statement against a claim or retry that came in between."""
    job_id = parse_job_id(form.get("job_id", ""))
    if form.get("confirm") != "yes":
        record = ctx.client.job(job_id)  # JobNotFound: 404
        return "confirm_delete.html", {"title": "Delete job?", "job": record,
                                       "finished": record.status in TERMINAL,
                                       "finished_statuses": FINISHED}
    deleted, status = ctx.client.delete(job_id)
    if not deleted:
        return with_notice(f"/jobs/{job_id}", f"not deleted: job {job_id} is {status.value}; "
                           f"only a finished job ({FINISHED}) can be deleted"
                           + (" (cancel it first)" if status is JobStatus.PENDING or
                              status is JobStatus.PROCESSING else ""))
    logger.info("console: deleted job %d (%s)", job_id, status.value)
    return with_notice("/jobs", f"deleted job {job_id} ({status.value}) and its attempt history")


#: The leases table's columns: slot is an integer, the token a bigint.
MAX_SLOT = 2**31 - 1
MAX_TOKEN = 2**63 - 1


def _number(form: Mapping[str, str], field: str, top: int) -> int:
    text = form.get(field, "")
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= top):
        raise ValueError(f"{field} must be a whole number from 0 to {top}, "
                         f"not {textrules.echo(text)}")
    return int(text)


def _lease_name(form: Mapping[str, str]) -> str:
    name = form.get("name", "")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ValueError(f"a lease name of 1 to {MAX_NAME_LENGTH} characters is required "
                         "(as the leases page shows it)")
    problem = textrules.problem(name)
    if problem is not None:
        raise ValueError(f"the lease name {problem}")
    return name


def clear_lease(ctx: Context, form: Mapping[str, str]) -> str | tuple[str, dict[str, Any]]:
    """Free one slot of a lease: a confirmation page naming the holder, then
    (``confirm=yes``) the clear, only if that same holder (fencing token) still holds it."""
    name = _lease_name(form)
    slot = _number(form, "slot", MAX_SLOT)
    token = _number(form, "token", MAX_TOKEN)
    if form.get("confirm") != "yes":
        held = [r for r in ctx.client.db.leases.read(name)
                if r.slot == slot and r.owner is not None]
        return "confirm_lease.html", {"title": "Clear lease?", "name": name, "slot": slot,
                                      "token": token, "lease": held[0] if held else None}
    cleared = ctx.client.db.leases.clear_holder(name, slot=slot, token=token)
    if cleared is None:
        return with_notice("/leases", f"not cleared: lease {name} slot {slot} is no longer "
                           f"held with fencing token {token} (released or taken over "
                           "meanwhile); nothing changed")
    logger.info("console: cleared lease %r slot %d (was %s on %s, token %d)", cleared.name,
                cleared.slot, cleared.owner, cleared.holder_host or "?", cleared.token)
    return with_notice("/leases", f"cleared lease {name} slot {slot} (was {cleared.owner}, "
                       f"token {cleared.token})")


ACTIONS: dict[str, Action] = {
    "retry": retry_job, "cancel": cancel_job, "pause-queue": pause_queue,
    "resume-queue": resume_queue, "drain-host": drain_host, "resume-host": resume_host,
    "suspend-schedule": suspend_schedule, "resume-schedule": resume_schedule,
    "run-schedule-now": run_schedule_now, "bulk": bulk,
    "delete-job": delete_job, "clear-lease": clear_lease,
}
