"""Expand, then contract: a migration may remove only what the previous release no
longer uses, and says so (docs/upgrades.md, "How it is enforced").

Every destructive statement (tests/support/ddlscan.py) in a migration newer than
the last release's needs an entry in ``migrations/contractions.toml`` naming the
object and the release that stopped using it. That release must be a released
one older than this code (the drop ships in a later release than the one that
stopped using the object), and its code must indeed not name the object.
Migrations up to the last release's are grandfathered.
"""

from __future__ import annotations

import functools
import re
import subprocess

import pytest

from jobwarden import version
from jobwarden.db import migrations
from jobwarden.db.migrations import Contraction, Migration
from tests.support import ddlscan, releases

#: Kinds whose names are specific enough to look for in a release's code.
_NAMED_KINDS = ("function", "procedure", "table", "view", "materialized view", "type",
                "domain", "index", "sequence", "constraint")


@functools.cache
def _release_migrations(commit: str) -> int:
    """The newest migration number in a released commit's tree."""
    listing = subprocess.run(
        ["git", "-C", str(releases.REPO), "ls-tree", "--name-only", commit,
         "operator/jobwarden/db/migrations/"], check=True, capture_output=True, text=True)
    numbers = [int(m.group(1)) for m in re.finditer(r"/(\d{4})_[a-z0-9_]+\.sql$",
                                                    listing.stdout, re.M)]
    return max(numbers, default=0)


def _still_used_by(commit: str, name: str) -> list[str]:
    """Files of a release's code (not its migrations) that name ``name``."""
    found = subprocess.run(
        ["git", "-C", str(releases.REPO), "grep", "-l", "-w", "-i", "-e", name, commit, "--",
         "operator/jobwarden", ":(exclude)operator/jobwarden/db/migrations"],
        check=False, capture_output=True, text=True)
    return [line.split(":", 1)[1] for line in found.stdout.splitlines()]


def violations(available: list[Migration], entries: list[Contraction]) -> list[str]:
    """What breaks the contract in these migrations with these entries (empty: nothing)."""
    named = {r.version: r for r in releases.all_releases()}
    grandfathered = _release_migrations(releases.previous().commit)
    found = ddlscan.scan((m.version, m.sql) for m in available)
    problems: list[str] = []
    matched: set[tuple[int, str]] = set()
    for number, findings in sorted(found.items()):
        if number <= grandfathered:
            continue
        for finding in findings:
            entry = next((e for e in entries if (e.migration, e.object) ==
                          (number, finding.object)), None)
            if entry is None:
                problems.append(
                    f"migration {number:04d} removes or changes {finding.object} "
                    f"({finding.statement!r}) without a contractions.toml entry naming the "
                    "release that stopped using it")
                continue
            matched.add((number, finding.object))
            problems.extend(_entry_problems(entry, named))
    for entry in entries:
        if (entry.migration, entry.object) not in matched and entry.migration > grandfathered:
            problems.append(f"contractions.toml entry {entry.object!r} of migration "
                            f"{entry.migration:04d} matches no statement there")
    return problems


def _entry_problems(entry: Contraction, named: dict[str, releases.Release]) -> list[str]:
    stopped = named.get(entry.stopped_using)
    if stopped is None:
        return [f"{entry.object}: stopped_using {entry.stopped_using!r} is not a release "
                "named in releases.toml"]
    if version.parse(entry.stopped_using) >= version.parse(version.VERSION):
        return [f"{entry.object}: removed in {version.VERSION}, which is not later than "
                f"{entry.stopped_using}, the release that stopped using it"]
    kind, _, name = entry.object.partition(" ")
    if kind in _NAMED_KINDS:
        users = _still_used_by(stopped.commit, name.rpartition(".")[2])
        if users:
            return [f"{entry.object}: release {entry.stopped_using} still names it in "
                    f"{', '.join(users[:3])}"]
    return []


def test_every_destructive_statement_since_the_last_release_names_who_stopped_using_it(
) -> None:
    assert violations(migrations.available(), migrations.contractions()) == []


def _with_scratch(sql: str) -> list[Migration]:
    """The real migrations plus one more after them."""
    found = migrations.available()
    return [*found, Migration(version=found[-1].version + 1, name="scratch", sql=sql)]


def test_a_scratch_drop_of_a_function_the_last_release_calls_fails_the_check() -> None:
    scratch = _with_scratch("DROP FUNCTION {schema}.lease_acquire(text, integer, text, "
                            "uuid, double precision, boolean, text);")
    problems = violations(scratch, migrations.contractions())
    assert len(problems) == 1
    assert "removes or changes function lease_acquire" in problems[0]


@pytest.mark.parametrize(("sql", "object_"), [
    ("ALTER TABLE {schema}.jobs DROP COLUMN priority", "column jobs.priority"),
    ("ALTER TABLE {schema}.jobs ALTER COLUMN queue TYPE varchar(64)", "column jobs.queue"),
    ("ALTER TABLE {schema}.jobs RENAME COLUMN queue TO queue_name", "column jobs.queue"),
    ("ALTER TABLE {schema}.jobs ALTER COLUMN queue DROP DEFAULT", "column jobs.queue"),
    ("ALTER TABLE {schema}.hosts ADD COLUMN x int, DROP CONSTRAINT hosts_cap_positive",
     "constraint hosts.hosts_cap_positive"),
    ("ALTER TABLE {schema}.leases RENAME TO lease_rows", "table leases"),
    ("DROP TABLE IF EXISTS {schema}.workers CASCADE", "table workers"),
    ("DROP TYPE {schema}.job_status", "type job_status"),
    ("DROP INDEX CONCURRENTLY {schema}.hosts_pool_idx", "index hosts_pool_idx"),
    ("ALTER TYPE {schema}.job_status RENAME VALUE 'failed' TO 'broken'", "type job_status"),
    ("ALTER FUNCTION {schema}.lease_acquire(text) RENAME TO lease_take", "function lease_acquire"),
    # A NOT NULL column without a default: the previous release's INSERTs leave it out.
    ("ALTER TABLE {schema}.workers ADD COLUMN zone text NOT NULL", "column workers.zone"),
    ("ALTER TABLE {schema}.hosts ADD COLUMN x int DEFAULT 0, ADD COLUMN y int NOT NULL",
     "column hosts.y"),
    ("ALTER TABLE {schema}.hosts ADD region text PRIMARY KEY", "column hosts.region"),
    # Every object a DROP names, not only the first.
    ("DROP TABLE {schema}.scratch_unused, {schema}.leases", "table leases"),
    ("DROP FUNCTION IF EXISTS {schema}.scratch_fn(int, text), {schema}.lease_acquire(text)",
     "function lease_acquire"),
    # A new argument list beside the old one: calls that relied on defaults turn ambiguous.
    ("CREATE OR REPLACE FUNCTION {schema}.lease_acquire(p_name text) RETURNS int "
     "LANGUAGE sql AS $$ SELECT 1; DROP TABLE x; $$", "function lease_acquire"),
])
def test_each_kind_of_destructive_statement_needs_an_entry(sql: str, object_: str) -> None:
    problems = violations(_with_scratch(sql), migrations.contractions())
    assert [p for p in problems if f"removes or changes {object_} " in p], problems


def test_additions_and_same_signature_replacements_need_no_entry() -> None:
    scratch = _with_scratch("""
        -- DROP TABLE in a comment is not a statement
        CREATE TABLE {schema}.scratch (id int, note text DEFAULT 'DROP TABLE jobs;');
        ALTER TABLE {schema}.jobs ADD COLUMN scratch int NOT NULL DEFAULT 0;
        ALTER TABLE {schema}.jobs ADD COLUMN scratch_serial bigserial NOT NULL,
            ADD COLUMN scratch_id bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
            ADD COLUMN scratch_sum int NOT NULL GENERATED ALWAYS AS (attempts + 1) STORED,
            ADD COLUMN scratch_note text;
        CREATE INDEX scratch_idx ON {schema}.scratch (id);
        CREATE OR REPLACE FUNCTION {schema}.scratch_fn(a int) RETURNS int
            LANGUAGE sql AS $body$ SELECT a; DROP TABLE x; $body$;
        CREATE OR REPLACE FUNCTION {schema}.scratch_fn(b int) RETURNS int
            LANGUAGE sql AS $$ SELECT b $$;
        CREATE FUNCTION {schema}.scratch_two(p_ttl double precision, p_at timestamptz)
            RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
        CREATE OR REPLACE FUNCTION {schema}.scratch_two(double precision, timestamptz)
            RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;
    """)
    assert violations(scratch, migrations.contractions()) == []


def _entry(scratch: list[Migration], stopped_using: str, object_: str) -> Contraction:
    return Contraction(migration=scratch[-1].version, object=object_,
                       stopped_using=stopped_using, why="scratch")


def test_an_entry_passes_only_when_a_release_before_this_one_stopped_using_the_object(
) -> None:
    previous = releases.previous().version
    scratch = _with_scratch("DROP TABLE {schema}.scratch_unused_by_any_release;")
    fine = _entry(scratch, previous, "table scratch_unused_by_any_release")
    assert violations(scratch, [fine]) == []
    # The release this code will be cannot be the one that stopped using it.
    unreleased = _entry(scratch, version.VERSION, "table scratch_unused_by_any_release")
    assert any("not a release named" in p or "not later than" in p
               for p in violations(scratch, [unreleased]))
    # An entry for a statement that is not there is stale.
    stale = _entry(scratch, previous, "table something_else")
    assert len(violations(scratch, [fine, stale])) == 1


def test_an_entry_that_names_a_release_still_using_the_object_fails() -> None:
    """0.1.0 calls lease_acquire (its db/sql): claiming it stopped is refused."""
    scratch = _with_scratch("DROP FUNCTION {schema}.lease_acquire(text);")
    wrong = _entry(scratch, releases.previous().version, "function lease_acquire")
    problems = violations(scratch, [wrong])
    assert len(problems) == 1 and "still names it in" in problems[0], problems


def test_the_scanner_finds_the_drop_that_broke_the_last_upgrade() -> None:
    """Issue 25: 0018 dropped lease_release while the release before still called it."""
    found = ddlscan.scan((m.version, m.sql) for m in migrations.available())
    assert "function lease_release" in [f.object for f in found.get(18, [])]


def test_the_schema_serves_from_the_newest_release_that_stopped_using_what_it_removed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [Contraction(99, "table a", "0.9.0", ""), Contraction(99, "table b", "0.10.0", ""),
               Contraction(98, "table c", "0.1.0", "")]
    monkeypatch.setattr(migrations, "contractions", lambda: entries)
    assert migrations.serves_from(99) == "0.10.0"  # compared as numbers, not text
    assert migrations.serves_from(98) == "0.1.0"
    assert migrations.serves_from(97) is None  # only adds: serves every release
