"""Fields every log line written while a job runs carries: job id, class, attempt,
queue and host.

Set per attempt (a context variable, so each slot thread and each asyncio task
sees its own) by the worker around an attempt and around recording its outcome;
read by the JSON log formatter, which writes them as fields rather than leaving
them to be parsed out of message text.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "jobwarden_log_fields", default=None)
#: The host this process works for (set by ``jobwarden worker``/``tick``); lines
#: written outside an attempt carry it too.
_process: dict[str, Any] = {}


def set_process_host(host: str) -> None:
    _process["host"] = host


@contextlib.contextmanager
def attempt(*, job_id: int, job_class: str, attempt: int, queue: str,
            host: str) -> Iterator[None]:
    token = _current.set({"job_id": job_id, "job_class": job_class, "attempt": attempt,
                          "queue": queue, "host": host})
    try:
        yield
    finally:
        _current.reset(token)


def current() -> dict[str, Any]:
    """The fields for a line logged now: the process's, overlaid by the attempt's."""
    found = _current.get()
    return {**_process, **found} if found else dict(_process)
