"""Code-defined schedules: declared next to the job code, synced when a worker starts.

Two spellings, both validated at import time (a bad schedule fails the app's
import loudly, not a runner pass silently)::

    from jobwarden.schedules import registry

    @registry.schedule("nightly-report", cron="0 3 * * *", timezone="Europe/Berlin")
    class NightlyReport(jobwarden.Job): ...

    schedules = [
        registry.define("cleanup", job=Cleanup, interval="15m"),
    ]

The sync (:func:`sync`, run once by every worker at start) writes each
definition with ``source="code"`` and ``origin=<the module that defined it>``:

* a row another source wrote (a ``JobSchedule``, the CLI) is never overwritten:
  the clash is logged and reported;
* a code schedule that is no longer defined is **suspended, not deleted**
  (``suspended_by="removed"``; its counts and history stay), but only when this
  process imported the module that defined it: a worker pool that does not load
  a module cannot tell whether the module still defines a schedule, so it leaves
  those rows alone. Defining it again resumes it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from jobwarden.jobs import definitions
from jobwarden.schedules.errors import ScheduleError
from jobwarden.schedules.store import Schedules, validate
from jobwarden.structs.schedules import ScheduleDefinition, SyncReport

__all__ = ["CodeSchedule", "clear", "define", "defined", "register", "schedule", "sync"]

logger = logging.getLogger("jobwarden.schedules")

J = TypeVar("J", bound=type[definitions.Job] | definitions.JobFunction)

_defined: dict[str, CodeSchedule] = {}


@dataclasses.dataclass(frozen=True)
class CodeSchedule:
    """One validated code definition and the module that made it."""

    spec: ScheduleDefinition

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def module(self) -> str | None:
        return self.spec.origin


def _caller_module(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return str(frame.f_globals.get("__name__", "__main__"))


def define(
    name: str, *, job: type[definitions.Job] | definitions.JobFunction | str,
    cron: str | None = None, interval: str | None = None, timezone: str = "UTC",
    data: Any = None, queue: str | None = None, priority: int | None = None,
    timeout_seconds: float | None = None, max_retries: int | None = None,
    idempotent: bool | None = None, catch_up: str = "latest",
    catch_up_window_seconds: int = 3600, catch_up_max: int = 10, overlap: str = "Allow",
    suspended: bool = False, module: str | None = None,
) -> CodeSchedule:
    """Validate and register a code schedule; returns it (for a module's ``schedules`` list).

    Unset queue/priority/timeout/retries come from the job class. Defining the
    same name twice from different modules is an error (one name, one schedule);
    re-running the same module (a reload) replaces its own definition.
    """
    origin = module or _caller_module(1)
    spec = validate(
        name, cron=cron, interval=interval, timezone=timezone, job_class=job, data=data,
        queue=queue, priority=priority, timeout_seconds=timeout_seconds,
        max_retries=max_retries, idempotent=idempotent, catch_up=catch_up,
        catch_up_window_seconds=catch_up_window_seconds, catch_up_max=catch_up_max,
        overlap=overlap, suspended=suspended, source="code", origin=origin,
    )
    existing = _defined.get(name)
    if existing is not None and existing.module != origin:
        raise ScheduleError(f"schedule {name!r} is defined twice: in {existing.module} "
                            f"and in {origin}")
    found = CodeSchedule(spec)
    _defined[name] = found
    return found


def schedule(name: str, **options: Any) -> Callable[[J], J]:
    """Class (or ``@job`` function) decorator: ``define(name, job=<it>, **options)``."""
    origin = options.pop("module", None) or _caller_module(1)

    def decorate(job: J) -> J:
        define(name, job=job, module=origin, **options)
        return job

    return decorate


def defined() -> list[CodeSchedule]:
    """Every code schedule registered in this process, by name."""
    return [_defined[name] for name in sorted(_defined)]


def register(code: CodeSchedule) -> None:
    """Register an already validated definition (e.g. one :func:`defined` returned)."""
    _defined[code.name] = code


def clear() -> None:
    """Forget every registration (tests)."""
    _defined.clear()


def sync(store: Schedules, schedules: Iterable[CodeSchedule] | None = None,
         *, imported: Iterable[str] | None = None) -> SyncReport:
    """Write code schedules into the table; suspend those the loaded code no longer defines.

    ``imported`` is the set of modules this process loaded (default: ``sys.modules``);
    only rows whose origin is among them can be judged "removed".
    """
    wanted = list(schedules) if schedules is not None else defined()
    loaded = set(imported) if imported is not None else set(sys.modules)
    report = SyncReport()
    for code in wanted:
        record = store.apply(code.spec, replace_other_sources=False)
        if record.source != "code":
            report.clashes.append(code.name)
            logger.warning(
                "schedule %r is defined in code (%s) and by %s%s: the %s definition stays%s",
                code.name, code.module, record.source,
                f" ({record.origin})" if record.origin else "", record.source,
                "" if record.spec_hash == code.spec.spec_hash else " and they differ")
        else:
            report.upserted.append(code.name)
    names = {code.name for code in wanted}
    gone = [name for name, origin in store.db.schedules.code_rows()
            if name not in names and origin is not None and origin in loaded]
    report.suspended.extend(store.db.schedules.mark_removed(gone))
    for name in report.suspended:
        logger.warning("schedule %r is no longer defined in code: suspended (not deleted)",
                       name)
    return report
