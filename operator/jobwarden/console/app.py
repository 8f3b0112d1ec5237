"""Assembling the console's ASGI app: routes, middleware (auth, CSRF, headers, access log)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jobwarden.api.client import Client
from jobwarden.console import actions, pages, rendering, security
from jobwarden.console.settings import ConsoleSettings

logger = logging.getLogger("jobwarden.console")

Next = Callable[[Request], Awaitable[Response]]


def _secured(response: Response) -> Response:
    for key, value in security.HEADERS.items():
        response.headers.setdefault(key, value)
    return response


def server_error(_request: Request, _exc: Exception) -> Response:
    """The last resort (an error in the middleware itself): still with the headers."""
    return _secured(PlainTextResponse("internal error: see the console's log",
                                      status_code=500))


class Guard(BaseHTTPMiddleware):
    """Allowed hosts, auth, the session cookie behind CSRF tokens, security headers,
    an access log, and a 500 page for anything a view did not expect.

    The Host check comes first: a request for another host name (DNS rebinding)
    gets no page, no session and no CSRF token. Every response, errors included,
    carries the security headers. The access log names the method, the route's
    path (never the query string, which may hold search text taken from job
    data), the status and the time.
    """

    def __init__(self, app: Any, *, settings: ConsoleSettings) -> None:
        super().__init__(app)
        self.settings = settings

    async def dispatch(self, request: Request, call_next: Next) -> Response:
        started = time.perf_counter()
        response: Response
        session = request.cookies.get(security.SESSION_COOKIE)
        if not self.settings.host_allowed(request.headers.get("host")):
            response = PlainTextResponse(
                "refused: this console does not answer to that Host name; start it with "
                "--allowed-host NAME to serve it under another name", status_code=421)
        elif not security.authorized(request, self.settings.token):
            response = PlainTextResponse(
                "authentication required", status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="Jobwarden console"'})
        else:
            # Static files never start a session: a stylesheet fetched alongside the
            # first page must not replace the cookie that page's CSRF tokens are for.
            fresh = session is None and not request.url.path.startswith("/static/")
            current = session or security.new_session()
            request.state.session = current
            try:
                response = await call_next(request)
            except Exception:
                logger.exception("%s %s failed", request.method, request.url.path)
                response = PlainTextResponse("internal error: see the console's log",
                                             status_code=500)
                fresh = False
            if fresh:
                response.set_cookie(security.SESSION_COOKIE, current, httponly=True,
                                    samesite="strict", secure=request.url.scheme == "https",
                                    path="/")
        _secured(response)
        logger.info("%s %s %d %.1fms", request.method, request.url.path, response.status_code,
                    (time.perf_counter() - started) * 1000)
        return response


def build_app(client: Client, settings: ConsoleSettings) -> Starlette:
    """The console app over ``client`` (which it does not close)."""
    settings.check()
    context = pages.Context(client=client, settings=settings, env=rendering.environment())
    routes = [
        Route("/", context.page(pages.overview)),
        Route("/queues", context.page(pages.queues)),
        Route("/jobs", context.page(pages.jobs)),
        Route("/jobs/go", context.redirect(pages.jump)),
        # Not {job_id:int}: its int() of thousands of digits raised inside the router
        # (a 500); the view checks the id and says what is wrong.
        Route("/jobs/{job_id}", context.page(pages.job)),
        Route("/schedules", context.page(pages.schedules)),
        Route("/schedules/{name:path}", context.page(pages.schedule)),
        Route("/leases", context.page(pages.leases)),
        Route("/hosts", context.page(pages.hosts)),
        Route("/healthz", lambda _request: PlainTextResponse("ok")),
        Route("/actions/{name}", context.action(actions.ACTIONS), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("jobwarden.console", "static")]),
              name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, settings=settings)],
                     exception_handlers={Exception: server_error})
