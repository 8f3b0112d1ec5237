"""Ticks: a worker's work on demand, for places that only have cron + curl.

:mod:`~jobwarden.tick.engine` runs a tick; :mod:`~jobwarden.tick.route` is the
``/tick`` HTTP route with its token security. The names below are the public ones.
"""

from jobwarden.tick.engine import SchedulePass, Ticker, TickLimits, TickResult
from jobwarden.tick.route import (
    FORWARDING_HEADERS,
    MIN_TOKEN_LENGTH,
    PATH,
    TOKEN_HEADER,
    RedactTokens,
    TickExtension,
    TickRoute,
    check_max_jobs,
    check_timeout,
    configured_token,
    token_in_query_allowed,
    token_matches,
)

__all__ = [
    "FORWARDING_HEADERS", "MIN_TOKEN_LENGTH", "PATH", "TOKEN_HEADER", "RedactTokens",
    "SchedulePass", "TickExtension", "TickLimits", "TickResult", "TickRoute", "Ticker",
    "check_max_jobs", "check_timeout", "configured_token", "token_in_query_allowed",
    "token_matches",
]
