"""Retention rules and table health: what database upkeep decides from (issue 16).

Why here and not beside the SQL: the worker, the operator and ``jobwarden
status`` all read these (the retention policy from the environment, the table
health from the database), and each must judge them the same way.

Retention: every finished status has a rule -- keep its rows at most
``max_age`` seconds after they finished and/or at most the newest
``max_rows`` of them. The defaults keep completed jobs one day and failed,
interrupted and cancelled jobs a week (someone may still want to read or retry
those); no count limit unless one is set. ``JOBWARDEN_RETENTION`` changes them,
e.g. ``completed=6h/100000,failed=30d,cancelled=off``: per status an age, an
optional ``/count``, or ``off`` (kept until purged by hand); ``off`` on its own
turns retention off. Statuses not named keep their defaults.
"""

from __future__ import annotations

import dataclasses
import math
import re

from jobwarden.structs.states import JobStatus

#: The statuses a retention rule may delete (never pending or processing).
FINISHED: tuple[JobStatus, ...] = (JobStatus.COMPLETED, JobStatus.FAILED,
                                   JobStatus.INTERRUPTED, JobStatus.CANCELLED)
DAY = 86_400.0

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}
_AGE = re.compile(r"([0-9]*\.?[0-9]+)(s|m|h|d)?")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetentionRule:
    """How long one status's finished rows are kept (None: no such limit)."""

    status: JobStatus
    max_age: float | None = None
    max_rows: int | None = None

    @property
    def active(self) -> bool:
        return self.max_age is not None or self.max_rows is not None

    def describe(self) -> str:
        parts = []
        if self.max_age is not None:
            parts.append(_age_text(self.max_age))
        if self.max_rows is not None:
            parts.append(f"newest {self.max_rows}")
        return f"{self.status.value}: {' and '.join(parts) if parts else 'kept'}"


DEFAULT_RULES: tuple[RetentionRule, ...] = (
    RetentionRule(status=JobStatus.COMPLETED, max_age=DAY),
    RetentionRule(status=JobStatus.FAILED, max_age=7 * DAY),
    RetentionRule(status=JobStatus.INTERRUPTED, max_age=7 * DAY),
    RetentionRule(status=JobStatus.CANCELLED, max_age=7 * DAY),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetentionPolicy:
    """One rule per finished status; see the module docstring."""

    rules: tuple[RetentionRule, ...] = DEFAULT_RULES

    @property
    def enabled(self) -> bool:
        return any(rule.active for rule in self.rules)

    def describe(self) -> str:
        return "; ".join(rule.describe() for rule in self.rules) if self.enabled else "off"

    @classmethod
    def parse(cls, text: str, *, name: str = "JOBWARDEN_RETENTION") -> RetentionPolicy:
        """The policy a ``JOBWARDEN_RETENTION`` value describes (blank: the defaults).

        Bad input is one ``ValueError`` naming ``name`` and the part it could not
        read (the caller turns it into a configuration error).
        """
        text = text.strip()
        if not text:
            return cls()
        if text.lower() == "off":
            return cls(rules=tuple(RetentionRule(status=s) for s in FINISHED))
        rules = {rule.status: rule for rule in DEFAULT_RULES}
        allowed = {s.value: s for s in FINISHED}
        for part in (p.strip() for p in text.split(",")):
            key, sep, value = part.partition("=")
            status = allowed.get(key.strip().lower())
            if not sep or status is None:
                raise ValueError(
                    f"{name}: {part[:60]!r} is not <status>=<age>[/<count>] or <status>=off "
                    f"(statuses: {', '.join(allowed)})")
            rules[status] = _rule(status, value.strip(), name=name)
        return cls(rules=tuple(rules[s] for s in FINISHED))


def _rule(status: JobStatus, value: str, *, name: str) -> RetentionRule:
    if value.lower() == "off":
        return RetentionRule(status=status)
    age_text, sep, count_text = value.partition("/")
    max_age: float | None = None
    max_rows: int | None = None
    if age_text:
        found = _AGE.fullmatch(age_text.strip())
        seconds = (float(found.group(1)) * _UNITS[found.group(2) or "s"]) if found else -1.0
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(
                f"{name}: {status.value} age {age_text[:30]!r} is not a positive duration "
                "(seconds, or 90s, 15m, 6h, 7d)")
        max_age = seconds
    if sep:
        try:
            max_rows = int(count_text)
        except ValueError:
            max_rows = -1
        if max_rows < 0:
            raise ValueError(
                f"{name}: {status.value} count {count_text[:30]!r} is not a whole number >= 0")
    if max_age is None and max_rows is None:
        raise ValueError(f"{name}: {status.value} needs an age, /count or off")
    return RetentionRule(status=status, max_age=max_age, max_rows=max_rows)


def _age_text(seconds: float) -> str:
    for unit, size in (("d", DAY), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


# -- table health ------------------------------------------------------------------------

#: Tables every job, lease or host refresh rewrites: the ones dead tuples pile up in.
HOT_TABLES: tuple[str, ...] = ("jobs", "job_attempts", "leases", "hosts", "workers")

#: ``jobwarden status`` (and the alert) warn when a hot table's dead tuples exceed
#: this many AND this share of its live rows: the first keeps a small table (a
#: lease table rewritten a thousand times a minute) from warning, the second a
#: large, healthy table between two vacuums (migration 0009 vacuums jobs after 1 %
#: + 1,000). Measured (docs/benchmarks.md): 2,000,000 dead tuples beside 10,000
#: live rows cut claiming to a third.
DEAD_TUPLES_MIN = 100_000
DEAD_TUPLES_RATIO = 0.2


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableHealth:
    """One table's tuple counts and vacuum state (statistics: approximate)."""

    table: str
    live: int
    dead: int
    #: The table's own autovacuum switch (reloption ``autovacuum_enabled``).
    autovacuum_enabled: bool
    #: Seconds since its last vacuum, manual or automatic (None: never, since the
    #: server's statistics were last reset).
    seconds_since_vacuum: float | None
    table_bytes: int
    index_bytes: int

    @property
    def dead_piling_up(self) -> bool:
        return self.dead > DEAD_TUPLES_MIN and self.dead > DEAD_TUPLES_RATIO * max(self.live, 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatabaseHealth:
    """The server's autovacuum switch and the hot tables' health."""

    autovacuum: bool
    tables: tuple[TableHealth, ...]

    def warnings(self) -> list[str]:
        """One line per problem, for ``jobwarden status`` (empty: nothing to say)."""
        found: list[str] = []
        if not self.autovacuum:
            found.append("autovacuum is off on this server (autovacuum or track_counts): dead "
                         "tuples of the job tables are never cleaned up and claiming slows "
                         "down; turn it on (docs/operations.md, Dead tuples)")
        for table in self.tables:
            if not table.autovacuum_enabled:
                found.append(f"autovacuum is off for table {table.table} "
                             "(autovacuum_enabled=false): turn it on with ALTER TABLE ... "
                             "RESET (autovacuum_enabled)")
            if table.dead_piling_up:
                found.append(
                    f"{table.table}: {table.dead:,} dead tuples beside {table.live:,} live "
                    f"rows (over {DEAD_TUPLES_MIN:,} and {DEAD_TUPLES_RATIO:.0%}): autovacuum is "
                    "not keeping up; VACUUM it, check for long transactions "
                    "(docs/operations.md, Dead tuples)")
        return found

    def as_json(self) -> dict[str, object]:
        return {
            "autovacuum": self.autovacuum,
            "tables": [dataclasses.asdict(t) for t in self.tables],
            "warnings": self.warnings(),
        }

