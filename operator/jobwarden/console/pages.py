"""The console's pages: each view reads through the Client and names its template.

Views are plain functions (Starlette runs them in its thread pool, since the
Client is synchronous). A page asked for with ``?partial=1`` renders only its
live fragment (``_<page>.html``), which htmx (vendored in ``static/vendor/htmx``)
fetches every few seconds and swaps in (``hx-get`` + ``hx-trigger="every ..."``):
live updates without full reloads, and every page still works without JavaScript.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobwarden import errors
from jobwarden.api.client import Client
from jobwarden.console import charts, inputs, security
from jobwarden.console.settings import ConsoleSettings
from jobwarden.structs.search import BULK_STATUSES, JobFilter, parse_time
from jobwarden.structs.states import JobStatus
from jobwarden.textrules import echo

View = Callable[["Context", Request], tuple[str, dict[str, Any]]]
#: An action returns where to redirect to, or a (template, data) page to render.
Action = Callable[["Context", Mapping[str, str]], "str | tuple[str, dict[str, Any]]"]

class NotFound(LookupError):
    """What a page or action names does not exist (404), e.g. an unknown host."""


NAV = [("/", "Overview"), ("/queues", "Queues"), ("/jobs", "Jobs"),
       ("/schedules", "Schedules"), ("/leases", "Leases"), ("/hosts", "Hosts")]


@dataclasses.dataclass(frozen=True)
class Context:
    client: Client
    settings: ConsoleSettings
    env: jinja2.Environment
    #: The overview's charts: settled minutes kept by this process (console/charts.py).
    history: charts.FinishedHistory = dataclasses.field(default_factory=charts.FinishedHistory)

    def render(self, request: Request, template: str, data: dict[str, Any],
               status_code: int = 200) -> HTMLResponse:
        session: str = request.state.session
        data.setdefault("title", "Error" if status_code >= 400 else "Jobwarden")
        html = self.env.get_template(template).render(
            **data, request_path=request.url.path, nav=NAV,
            read_only=self.settings.read_only,
            csrf_field=security.CSRF_FIELD,
            csrf=security.csrf_token(self.settings.secret, session),
            refresh_ms=int(self.settings.refresh_seconds * 1000),
            notice=request.query_params.get("notice", ""),
        )
        return HTMLResponse(html, status_code=status_code)

    def page(self, view: View) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                inputs.check_fields("query parameter", request.query_params.multi_items())
                inputs.check_fields("path parameter", request.path_params.items())
                template, data = view(self, request)
            except (errors.JobNotFound, NotFound) as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 404)
            except ValueError as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 400)
            if request.query_params.get("partial") == "1":
                template = f"_{template}"
            return self.render(request, template, data)
        return endpoint

    def action(self, table: Mapping[str, Action]
               ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if self.settings.read_only:
                return self.render(request, "error.html",
                                   {"message": "refused: the console is read-only"}, 403)
            form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
            if not security.same_origin(request) or not security.csrf_ok(
                    self.settings.secret, request.cookies.get(security.SESSION_COOKIE),
                    form.get(security.CSRF_FIELD)):
                return self.render(request, "error.html", {
                    "message": "refused: this form's security token is missing or stale; "
                               "reload the page and try again"}, 403)
            handler = table.get(request.path_params["name"])
            if handler is None:
                return self.render(request, "error.html", {"message": "no such action"}, 404)
            try:
                inputs.check_fields("form field", form.items())
                target = await run_in_threadpool(handler, self, form)
            except (errors.JobNotFound, NotFound) as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 404)
            except ValueError as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 400)
            if isinstance(target, tuple):
                return self.render(request, *target)
            return RedirectResponse(target, status_code=303)
        return endpoint


    def redirect(self, view: Callable[[Context, Request], str]) -> Callable[[Request], Response]:
        """A GET answered with a redirect (303) to where ``view`` says; errors as pages."""
        def endpoint(request: Request) -> Response:
            try:
                inputs.check_fields("query parameter", request.query_params.multi_items())
                target = view(self, request)
            except (errors.JobNotFound, NotFound) as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 404)
            except ValueError as exc:
                return self.render(request, "error.html", {"message": str(exc)}, 400)
            return RedirectResponse(target, status_code=303)
        return endpoint


#: A job id as typed: digits, optionally after "#" (as the CLI and live view print it).
_JOB_ID = re.compile(r"#?([0-9]{1,19})")
#: Job ids are bigint (0001_jobs.sql).
MAX_JOB_ID = 2**63 - 1


def parse_job_id(text: str) -> int:
    """A job id from a form or query field; ValueError (a 400) for anything else."""
    found = _JOB_ID.fullmatch(text.strip())
    if found is None or not 1 <= int(found.group(1)) <= MAX_JOB_ID:
        raise ValueError(f"not a job id: {echo(text)} (a whole number from 1 to {MAX_JOB_ID})")
    return int(found.group(1))


def with_notice(path: str, notice: str) -> str:
    joiner = "&" if "?" in path else "?"
    return f"{path}{joiner}{urllib.parse.urlencode({'notice': notice})}"


# -- filters -----------------------------------------------------------------------

FILTER_KEYS = ("status", "queue", "class_prefix", "since", "until", "text", "error")


def filter_from(params: Mapping[str, str] | Any, now: datetime.datetime) -> JobFilter:
    """A JobFilter from query parameters or form fields (names as in FILTER_KEYS)."""
    getlist = getattr(params, "getlist", None)
    raw_statuses = getlist("status") if getlist else [params.get("status", "")]
    statuses: list[JobStatus] = []
    for value in raw_statuses:
        for part in value.split(","):
            if part:
                try:
                    statuses.append(JobStatus(part))
                except ValueError:
                    raise ValueError(f"unknown status {part!r}") from None
    since = params.get("since") or None
    until = params.get("until") or None
    return JobFilter(
        statuses=tuple(dict.fromkeys(statuses)),
        queue=params.get("queue") or None,
        class_prefix=params.get("class_prefix") or None,
        created_from=parse_time(since, flag="since", now=now) if since else None,
        created_to=parse_time(until, flag="until", now=now) if until else None,
        text=params.get("text") or None,
        error=params.get("error") or None,
    )


def filter_query(params: Mapping[str, str] | Any) -> dict[str, str]:
    """The filter's own parameters, as given (to carry them into links and forms)."""
    out: dict[str, str] = {}
    for key in FILTER_KEYS:
        getlist = getattr(params, "getlist", None)
        values = getlist(key) if getlist else [params.get(key, "")]
        joined = ",".join(v for v in values if v)
        if joined:
            out[key] = joined
    return out


# -- views -------------------------------------------------------------------------

def overview(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    client = ctx.client
    queues = client.queues()
    hosts = client.hosts.status()
    leases = client.db.leases.list(limit=1000)
    totals = {
        "pending": sum(q.pending for q in queues), "due": sum(q.due for q in queues),
        "running": sum(q.running for q in queues),
        "completed": sum(q.completed for q in queues),
        "failed": sum(q.failed for q in queues),
        "oldest": max((q.oldest_due_seconds for q in queues), default=0.0),
        "paused": sum(1 for q in queues if q.paused),
        "hosts": len(hosts), "draining": sum(1 for h in hosts if h.draining),
        "leases": sum(1 for lease in leases if lease.held),
    }
    failures = client.search(JobFilter(statuses=(JobStatus.FAILED, JobStatus.INTERRUPTED)),
                             limit=10)
    running = client.running(limit=RUNNING_SHOWN)
    now = client.db.jobs.now()
    return "overview.html", {"title": "Overview", "queues": queues, "totals": totals,
                             "failures": failures, "running": running, "now": now,
                             "charts": charts.overview_charts(ctx.history.series(client.db, now)),
                             "live_url": "/?partial=1"}


#: Running jobs listed on the overview (the card above counts them all).
RUNNING_SHOWN = 20


def jump(ctx: Context, request: Request) -> str:
    """The header's "job id" form: to that job's page, or a 404 page saying none has it."""
    job_id = parse_job_id(request.query_params.get("id", ""))
    ctx.client.job(job_id)  # JobNotFound: a 404 page here, not a redirect to one
    return f"/jobs/{job_id}"


def queues(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    return "queues.html", {"title": "Queues", "queues": ctx.client.queues(),
                           "live_url": "/queues?partial=1"}


def jobs(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    params = request.query_params
    where = filter_from(params, ctx.client.db.now())
    before_text = params.get("before") or ""
    before = parse_job_id(before_text) if before_text else None
    page = ctx.client.search(where, before=before, limit=ctx.settings.page_size)
    query = filter_query(params)
    older = None
    if len(page) == ctx.settings.page_size:
        older = "/jobs?" + urllib.parse.urlencode({**query, "before": str(page[-1].id)})
    live = "/jobs?" + urllib.parse.urlencode({**query, "partial": "1"}) if before is None \
        else None
    return "jobs.html", {
        "title": "Jobs", "jobs": page, "query": query, "older": older,
        "newest": "/jobs?" + urllib.parse.urlencode(query), "paged": before is not None,
        "statuses": [s.value for s in JobStatus],
        "selected": {s.value for s in where.statuses}, "live_url": live,
        "bulk_actions": list(BULK_STATUSES),
    }


def job(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    job_id = parse_job_id(request.path_params["job_id"])
    record = ctx.client.job(job_id)
    attempts = ctx.client.db.jobs.attempts(job_id)
    holders = ctx.client.db.leases.read(record.lease_name) if record.lease_name else []
    timeline: list[tuple[datetime.datetime, str]] = [(record.created_at, "enqueued")]
    if record.run_at != record.created_at:
        timeline.append((record.run_at, "due (run_at)"))
    for attempt in attempts:
        if attempt.started_at is not None:
            timeline.append((attempt.started_at,
                             f"attempt {attempt.attempt} claimed by {attempt.host or '?'}"))
        timeline.append((attempt.finished_at,
                         f"attempt {attempt.attempt} {attempt.outcome} -> {attempt.status_after}"))
    if record.status is JobStatus.PROCESSING and record.claimed_at is not None:
        timeline.append((record.claimed_at,
                         f"attempt {record.attempts} claimed by {record.claimed_by or '?'}"))
        if record.heartbeat_at is not None:
            timeline.append((record.heartbeat_at, "last heartbeat"))
    if record.finished_at is not None:
        timeline.append((record.finished_at, f"finished: {record.status.value}"))
    timeline.sort(key=lambda item: item[0])
    return "job.html", {"title": f"Job {job_id}", "job": record, "attempts": attempts,
                        "holders": holders, "timeline": timeline,
                        "live_url": f"/jobs/{job_id}?partial=1"}


def schedules(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    store = ctx.client.schedules
    found = store.list()
    upcoming: dict[str, list[datetime.datetime]] = {}
    for record in found:
        if not record.suspended:
            try:
                upcoming[record.name] = store.next_slots(record.name, count=3)
            except ValueError:
                upcoming[record.name] = []
    recent = {record.name: ctx.client.db.jobs.schedule_recent(record.name, limit=5)
              for record in found}
    return "schedules.html", {"title": "Schedules", "schedules": found, "upcoming": upcoming,
                              "recent": recent, "live_url": "/schedules?partial=1"}


#: Slots of a schedule's fate history shown on its page (the table keeps up to 50).
SLOT_HISTORY_SHOWN = 30


def schedule(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    """One schedule: facts, the next slots, every fate's count, the last slots' fates."""
    name: str = request.path_params["name"]
    store = ctx.client.schedules
    record = store.get(name)
    if record is None:
        raise errors.JobNotFound(f"no schedule named {name!r}")
    upcoming: list[datetime.datetime] = []
    if not record.suspended:
        try:
            upcoming = store.next_slots(name, count=10)
        except ValueError:
            upcoming = []
    path = "/schedules/" + urllib.parse.quote(name, safe="/")
    return "schedule.html", {
        "title": f"Schedule {name}", "schedule": record, "upcoming": upcoming,
        "fates": record.fate_counts(),
        "slots": ctx.client.db.schedules.slots(name, limit=SLOT_HISTORY_SHOWN),
        "recent": ctx.client.db.jobs.schedule_recent(name, limit=10),
        "active": store.active_jobs(name), "live_url": f"{path}?partial=1",
    }


def leases(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    return "leases.html", {"title": "Leases", "leases": ctx.client.db.leases.list(limit=1000),
                           "live_url": "/leases?partial=1"}


def hosts(ctx: Context, request: Request) -> tuple[str, dict[str, Any]]:
    return "hosts.html", {"title": "Hosts", "hosts": ctx.client.hosts.status(),
                          "live_url": "/hosts?partial=1"}
