"""Bad input anywhere in the console: a 4xx saying what is wrong, the headers, no change.

Nothing here lists the console's pages or forms by hand. The routes come from
the app's router; the query parameters and forms from crawling a seeded
console the way a browser would (links, ``hx-get`` refreshes, GET forms
submitted, POST forms recorded with their fields); the actions from
``actions.ACTIONS``. A page, parameter, form or action added later is covered
without touching this file -- and if the crawl cannot reach a route or an
action, the test fails and says so.

A property-based test (hypothesis) then puts any text in any parameter or
field of those. Every request with a bad value must answer below 500 with the
security headers; a NUL (which PostgreSQL cannot store) must be a 400 naming the
problem; and a refused request must leave every table of the schema as it was.
"""

from __future__ import annotations

import dataclasses
import html.parser
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import jobwarden
import jobwarden.console as console_package
from jobwarden.console import actions
from jobwarden.db.database import Database
from jobwarden.structs.jobs import Failure
from tests.support import testjobs

SECURITY_HEADERS = ("content-security-policy", "x-frame-options", "x-content-type-options")
#: Always refused (PostgreSQL text cannot hold them): 400, nothing changed.
NUL_VALUES = ["\x00", "mail\x00x"]
#: Odd but sometimes meaningful: never a 500, and nothing changed when refused.
ODD_VALUES = ["99999999999999d", "9" * 25, "9" * 5000, "-1", "0", " ", "\u00b2",
              "\u0663", "1e309", "\ud800", "x" * 3000, "2026-13-45", "9999-12-31T23:59:59-14:00"]
#: Fields a crawl cannot see: the confirm step of a bulk action, a job's delete and a
#: lease's clear is rendered only in answer to a POST (its own form, with these fields,
#: is the only one that has them). test_every_field_a_template_posts_is_exercised
#: checks that this is every such field.
POST_ONLY_FIELDS = {"bulk": {"confirm": "yes"}, "delete-job": {"confirm": "yes"},
                    "clear-lease": {"confirm": "yes"}}
#: What the crawl types into a GET form's empty fields: "x", or a value of the field's
#: syntax (the fixture adds a job id for "id").
TYPED = {"since": "30d", "until": "2099-01-01"}
#: Query parameters no page links to: the notice a redirect after an action carries.
UNLINKED_PARAMS = {"notice"}


def _encode(fields: dict[str, str]) -> str:
    # surrogatepass: a lone surrogate goes out as the bytes a browser could send.
    return urllib.parse.urlencode(fields, encoding="utf-8", errors="surrogatepass")


@dataclasses.dataclass
class Form:
    method: str
    action: str
    fields: dict[str, str]


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        for key in ("href", "hx-get"):
            if found.get(key, "").startswith("/"):
                self.links.append(found[key])
        if tag == "form":
            self.forms.append(Form(found.get("method", "get").lower(),
                                   found.get("action", ""), {}))
        elif tag in ("input", "select", "textarea") and self.forms and found.get("name"):
            self.forms[-1].fields.setdefault(found["name"], found.get("value", ""))


@dataclasses.dataclass
class Crawl:
    """What a browser can reach: one URL per route (the first seen), params, POST forms."""

    urls: dict[str, str]  # route path -> a URL of it
    params: set[str]
    forms: dict[str, list[Form]]  # action name -> its forms


def _route_of(routes: list[Route], path: str) -> str | None:
    for route in routes:
        if route.path_regex.match(path):
            return route.path
    return None


def crawl(http: TestClient, routes: list[Route], typed: dict[str, str],
          limit: int = 150) -> Crawl:
    seen: set[tuple[str, frozenset[str]]] = set()
    queue = ["/"]
    result = Crawl(urls={}, params=set(), forms={})
    while queue and len(seen) < limit:
        url = queue.pop(0)
        parts = urllib.parse.urlsplit(url)
        keys = frozenset(urllib.parse.parse_qs(parts.query, keep_blank_values=True))
        if (parts.path, keys) in seen or parts.path.startswith("/static/"):
            continue
        seen.add((parts.path, keys))
        result.params |= keys
        route = _route_of(routes, parts.path)
        if route is None:
            continue
        page = http.get(url)
        assert page.status_code == 200, (url, page.status_code, page.text[:300])
        result.urls.setdefault(route, url)
        parser = _Page()
        parser.feed(page.text)
        queue.extend(parser.links)
        for form in parser.forms:
            if form.method == "get":
                result.params |= set(form.fields)
                filled = {k: v or typed.get(k, "x") for k, v in form.fields.items()}
                queue.append(f"{form.action}?{_encode(filled)}")
            elif form.action.startswith("/actions/"):
                name = form.action.removeprefix("/actions/")
                result.forms.setdefault(name, []).append(form)
    return result


def digester(dsn: str, schema: str) -> Callable[[], dict[str, str]]:
    """Every table of the schema as an md5 of its sorted rows, in one round trip."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [str(r[0]) for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE' ORDER BY 1", [schema])]
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {}, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                "FROM {}.{} t").format(sql.Literal(table), sql.Identifier(schema),
                                       sql.Identifier(table))
        for table in tables)

    def snapshot() -> dict[str, str]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return {str(name): str(value) for name, value in conn.execute(query)}
    return snapshot


def _seed(client: jobwarden.Client, db: Database) -> int:
    first = client.enqueue(testjobs.Record, {"n": 1}, queue="mail").id
    client.enqueue(testjobs.Record, {"n": 2}, queue="reports")
    client.enqueue(testjobs.Boom, None, queue="failing")
    [claim] = db.jobs.claim(host="worker-a", limit=1, grace_seconds=30, queues=["failing"])
    db.jobs.fail(Failure(id=claim.id, claim_token=claim.claim_token, error="boom",
                         retryable=False, retry_in_seconds=0))
    client.pause_queue("reports", by="test")
    for host in ("worker-a", "worker-b"):
        db.hosts.register(host=host, pool="default", code_version="v1", cap=4,
                          worker_id=uuid.uuid4(), pid=1, concurrency=4, queues=[])
    client.hosts.drain(host="worker-b", reason="test")
    db.leases.try_acquire(name="reports:nightly", owner="job-1", ttl_seconds=600,
                          host="worker-a")
    client.schedules.upsert("nightly", cron="0 3 * * *", job_class=testjobs.Record,
                            queue="reports")
    client.schedules.upsert("team/hourly", interval="1h", job_class=testjobs.Record)
    client.schedules.suspend("team/hourly")
    return first


@dataclasses.dataclass
class Site:
    http: TestClient
    routes: list[Route]
    crawl: Crawl
    csrf: str
    snapshot: Callable[[], dict[str, str]]


@pytest.fixture
def site(make_console: Callable[..., TestClient], client: jobwarden.Client, db: Database,
         dsn: str) -> Iterator[Site]:
    job = _seed(client, db)
    http = make_console(page_size=1)  # a page of one: the "older" link (before=) appears
    routes = [r for r in http.app.routes if isinstance(r, Route)]  # type: ignore[attr-defined]
    found = crawl(http, routes, {**TYPED, "id": str(job)})
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', http.get("/jobs").text)
    assert token is not None
    yield Site(http, routes, found, token.group(1), digester(dsn, db.schema))


def _assert_safe(response: Any, what: str) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    for name in SECURITY_HEADERS:
        assert name in response.headers, (what, name)


def _get_routes(site: Site) -> list[Route]:
    return [r for r in site.routes if "GET" in (r.methods or ())]


def test_the_crawl_reaches_every_page_and_every_action(site: Site) -> None:
    unreached = {r.path for r in _get_routes(site)} - set(site.crawl.urls) - {"/healthz"}
    assert unreached == set(), "seed data the crawl can reach these pages through"
    assert set(actions.ACTIONS) - set(site.crawl.forms) == set(), \
        "seed data whose page renders a form for these actions"
    assert {"before", "partial", "status", "queue", "since", "text"} <= site.crawl.params


TEMPLATES = Path(console_package.__file__).parent / "templates"


def test_every_field_a_template_posts_is_exercised(site: Site) -> None:
    """The crawl sees the forms of pages a GET renders; a form rendered only in answer
    to a POST (a confirmation step) is known from POST_ONLY_FIELDS. Every field name
    written into any template's action form must be one of the two, so a field added
    to a confirmation step later is not left out of the bad-input tests unnoticed."""
    crawled = {name: {field for form in forms for field in form.fields}
               for name, forms in site.crawl.forms.items()}
    missing: dict[str, set[str]] = {}
    for template in sorted(TEMPLATES.glob("*.html")):
        parser = _Page()
        parser.feed(template.read_text(encoding="utf-8"))
        for form in parser.forms:
            if not form.action.startswith("/actions/"):
                continue
            name = form.action.removeprefix("/actions/")
            literal = {field for field in form.fields if "{" not in field}
            left = literal - crawled.get(name, set()) - set(POST_ONLY_FIELDS.get(name, {}))
            if left:
                missing.setdefault(name, set()).update(left)
    assert missing == {}, "add these to POST_ONLY_FIELDS (with a value that reaches them)"


#: How the console's code reads a query parameter or a form field by name.
_READS = re.compile(r'(?:query_params|params|form)\.(?:get|getlist)\(\s*"(\w+)"'
                    r'|_(?:name|number)\(form, "(\w+)"')


def test_every_parameter_and_field_the_code_reads_is_exercised(site: Site) -> None:
    """Every name the console's pages and actions read from a request (found in their
    source) is one the tests above put bad values in: crawled, unlinked or post-only."""
    read = {a or b for path in sorted(TEMPLATES.parent.glob("*.py"))
            for a, b in _READS.findall(path.read_text(encoding="utf-8"))}
    assert {"before", "id", "job_id", "slot", "confirm"} <= read  # the scan finds them
    exercised = site.crawl.params | UNLINKED_PARAMS | {
        field for forms in site.crawl.forms.values() for form in forms
        for field in form.fields} | {
        field for fields in POST_ONLY_FIELDS.values() for field in fields}
    assert read - exercised == set()


def test_every_query_parameter_of_every_page(site: Site) -> None:
    before = site.snapshot()
    params = sorted(site.crawl.params | UNLINKED_PARAMS)
    for route in _get_routes(site):
        url = site.crawl.urls.get(route.path, route.path).split("?", 1)[0]
        for param in params:
            for value in NUL_VALUES:
                for extra in ({}, {"partial": "1"}):
                    what = f"GET {url} {param}={value!r} {extra}"
                    page = site.http.get(f"{url}?{_encode({**extra, param: value})}")
                    _assert_safe(page, what)
                    if route.path != "/healthz":
                        assert page.status_code == 400, what
                        assert "NUL" in page.text and param in page.text, what
            for value in ODD_VALUES:
                what = f"GET {url} {param}={value[:30]!r}"
                _assert_safe(site.http.get(f"{url}?{_encode({param: value})}"), what)
    assert site.snapshot() == before  # reading never writes


def test_every_path_parameter_of_every_page(site: Site) -> None:
    before = site.snapshot()
    for route in _get_routes(site):
        for name in route.param_convertors:
            for value in [*NUL_VALUES, *ODD_VALUES, "../../etc/passwd", "%00", "a/b"]:
                path = route.path.replace("{" + name + "}", urllib.parse.quote(
                    value, safe="", errors="surrogatepass"))
                path = re.sub(r"\{(\w+):\w+\}", urllib.parse.quote(value, safe="",
                                                                  errors="surrogatepass"), path)
                page = site.http.get(path)
                _assert_safe(page, f"GET {path[:80]}")
                if "\x00" in value:
                    assert page.status_code in (400, 404), path
    for mount in (r for r in site.http.app.routes if isinstance(r, Mount)):  # type: ignore[attr-defined]
        for tail in ["%00", "x%00.css", "..%2f..%2fpyproject.toml", "%ff", "vendor/%00"]:
            _assert_safe(site.http.get(f"{mount.path}/{tail}"), f"GET {mount.path}/{tail}")
    assert site.snapshot() == before


def _post(site: Site, name: str, fields: dict[str, str]) -> Any:
    return site.http.post(f"/actions/{name}", content=_encode(fields).encode(),
                          headers={"Content-Type": "application/x-www-form-urlencoded"},
                          follow_redirects=False)


def test_every_field_of_every_action(site: Site) -> None:
    state = site.snapshot()
    for name, forms in sorted(site.crawl.forms.items()):
        # One form per set of fields (the same button on several pages is one form).
        distinct = {frozenset(form.fields): form for form in forms}.values()
        for form in distinct:
            base = {**form.fields, **POST_ONLY_FIELDS.get(name, {}), "csrf": site.csrf}
            for field in [*base, "unexpected"]:
                for value in [*NUL_VALUES, *ODD_VALUES]:
                    what = f"POST {name} {field}={value[:30]!r}"
                    answer = _post(site, name, {**base, field: value})
                    _assert_safe(answer, what)
                    if "\x00" in value and field != "csrf":
                        assert answer.status_code == 400, what
                        assert "NUL" in answer.text and field in answer.text, what
                    elif "\x00" in value:
                        assert answer.status_code == 403, what
                    if answer.status_code >= 400:
                        assert site.snapshot() == state, what
                    else:  # an odd value that is a valid one (a queue named "0")
                        state = site.snapshot()


def test_the_action_s_name_in_the_path(site: Site) -> None:
    """POST /actions/{name}: a name no action has, whatever its text, is a 404."""
    before = site.snapshot()
    for value in [*NUL_VALUES, *ODD_VALUES, "pause-queue/x", "..%2fqueues"]:
        name = urllib.parse.quote(value, safe="", errors="surrogatepass")
        answer = _post(site, name, {"csrf": site.csrf, "queue": "mail"})
        _assert_safe(answer, f"POST /actions/{name[:40]}")
        assert answer.status_code in (404, 405), (name[:40], answer.status_code)
    assert site.snapshot() == before


def test_the_issue_s_examples(site: Site, client: jobwarden.Client) -> None:
    """The nineteen 500s of issue 28, by name: each a 4xx saying what is wrong."""
    examples = {
        "/jobs?text=%00": "NUL", "/jobs?error=%00": "NUL", "/jobs?queue=%00": "NUL",
        "/jobs?class_prefix=%00": "NUL", "/jobs?text=%00&partial=1": "NUL",
        "/schedules/%00": "NUL", "/jobs?since=99999999999999d": "year 1",
        "/jobs?before=99999999999999999999": "a whole number from 1 to",
        "/jobs/99999999999999999999": "a whole number from 1 to",
    }
    for url, says in examples.items():
        page = site.http.get(url)
        assert page.status_code == 400 and says in page.text, (url, page.text[-300:])
    before = site.snapshot()
    for name, field in [("pause-queue", "queue"), ("resume-queue", "queue"),
                        ("drain-host", "host"), ("resume-host", "host"),
                        ("suspend-schedule", "schedule"), ("run-schedule-now", "schedule"),
                        ("bulk", "queue")]:
        answer = _post(site, name, {"csrf": site.csrf, "action": "cancel", field: "a\x00b"})
        assert answer.status_code == 400 and "NUL" in answer.text, name
    overflow = _post(site, "bulk", {"csrf": site.csrf, "action": "cancel",
                                    "since": "99999999999999d"})
    assert overflow.status_code == 400 and "year 1" in overflow.text
    assert site.snapshot() == before


def test_blank_queue_pause_and_unknown_host_drain_are_refused(site: Site) -> None:
    before = site.snapshot()
    blank = _post(site, "pause-queue", {"csrf": site.csrf, "queue": " "})
    assert blank.status_code == 400 and "queue must be a non-blank string" in blank.text
    for name in ("drain-host", "resume-host"):
        unknown = _post(site, name, {"csrf": site.csrf, "host": "no-such-host"})
        assert unknown.status_code == 404, name
        assert "no registered host named &#39;no-such-host&#39;" in unknown.text, name
    assert site.snapshot() == before


#: Any text, the characters PostgreSQL cannot store included (NUL, lone surrogates).
_CHARS = st.characters(exclude_categories=())
ANY_TEXT = st.text(_CHARS, max_size=40) | st.sampled_from([*NUL_VALUES, *ODD_VALUES]) | \
    st.builds("{}\x00{}".format, st.text(_CHARS, max_size=8), st.text(_CHARS, max_size=8))


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_text_in_any_parameter_or_field_is_never_a_500(site: Site, data: st.DataObject
                                                           ) -> None:
    """Property: whatever text goes into whichever parameter of a page, or field of an
    action's form, the answer is below 500 and carries the security headers."""
    if data.draw(st.booleans(), label="page or action"):
        route = data.draw(st.sampled_from(_get_routes(site)), label="route")
        url = site.crawl.urls.get(route.path, route.path).split("?", 1)[0]
        params = data.draw(st.dictionaries(
            st.sampled_from(sorted(site.crawl.params | UNLINKED_PARAMS)), ANY_TEXT,
            min_size=1, max_size=3), label="params")
        _assert_safe(site.http.get(f"{url}?{_encode(params)}"), f"GET {url} {params!r}")
    else:
        name = data.draw(st.sampled_from(sorted(site.crawl.forms)), label="action")
        form = data.draw(st.sampled_from(site.crawl.forms[name]), label="form")
        base = {**form.fields, **POST_ONLY_FIELDS.get(name, {}), "csrf": site.csrf}
        fields = sorted(set(base) - {"csrf"})  # a changed token is a 403, tested above
        changed = data.draw(st.dictionaries(st.sampled_from(fields), ANY_TEXT,
                                            min_size=1, max_size=3), label="fields")
        _assert_safe(_post(site, name, {**base, **changed}), f"POST {name} {changed!r}")
