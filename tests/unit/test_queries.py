"""Named queries: every file parses, names are unique, the schema is quoted once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobwarden.db import migrations, queries

SQL_FOLDER = Path(queries.__file__).with_name("sql")


def test_every_named_query_renders_for_a_quoted_schema() -> None:
    rendered = queries.for_schema('odd "schema"').complete()
    assert "job_claim_any" in rendered and "job_insert_many" in rendered
    for name, text in rendered.items():
        assert "{schema}" not in text, name
        if "jobs" in text:
            assert '"odd ""schema"""' in text or "pg_notify" in text, name


def test_a_query_is_rendered_when_first_looked_up_and_an_unknown_name_is_a_key_error() -> None:
    rendered = queries.Rendered("lazy_schema")
    assert len(rendered) == 0
    text = rendered["job_claim_any"]
    assert '"lazy_schema".jobs' in text and "{fragment" not in text
    assert list(rendered) == ["job_claim_any"]  # only what was asked for
    with pytest.raises(KeyError):
        rendered["no_such_query"]
    with pytest.raises(KeyError):
        rendered["fragment_claim_rows"]  # a piece, not a statement
    assert rendered.complete()["job_claim_any"] == text
    assert "job_insert_many" in rendered


def test_a_query_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        queries.parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [m.version for m in migrations.available()]
    assert versions == list(range(1, len(versions) + 1))


def test_the_printed_migration_script_is_a_single_transaction() -> None:
    script = migrations.script("jobwarden")
    assert script.splitlines()[1] == "BEGIN;"
    assert script.rstrip().endswith("COMMIT;")
    assert 'CREATE TABLE "jobwarden".jobs' in script


@pytest.mark.parametrize("schema", ["bad;name", "x'y", "1abc", "", "a" * 64])
def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(schema: str) -> None:
    from jobwarden import errors
    from jobwarden.db.database import Database

    with pytest.raises(errors.ConfigurationError, match="invalid schema name"):
        Database("postgresql://nowhere.invalid/x", schema=schema)


def test_a_fragment_is_included_where_named_and_is_not_a_query_itself() -> None:
    rendered = queries.for_schema("jobwarden").complete()
    assert not any(name.startswith(queries.FRAGMENT) for name in rendered)
    claims = [rendered[n] for n in ("job_claim_any", "job_claim_queues",
                                    "job_claim_capped_any", "job_claim_capped_queues")]
    for text in claims:
        assert "{fragment" not in text
        assert "claim_token = md5(%(batch)s" in text  # one fresh token per row and claim
        assert 'UPDATE "jobwarden".jobs AS j' in text


def test_a_process_holds_the_text_of_the_queries_it_rendered_not_all_the_package_ships() -> None:
    """Every process renders some of the ~150 named queries (an idle worker about
    fifteen): holding every file's text kept ~125 KiB resident in each (docs/benchmarks.md,
    "Renovation, no regression (issue 29)"). Measured in a fresh process, after the
    module is imported: what stays allocated once one query is rendered."""
    code = textwrap.dedent("""
        import gc, tracemalloc
        from jobwarden.db import queries
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        text = queries.Rendered("s")["job_claim_any"]
        gc.collect()
        print(tracemalloc.get_traced_memory()[0] - before, len(text.encode()))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    held, rendered = (int(n) for n in done.stdout.split())
    shipped = sum(len(f.read_bytes()) for f in SQL_FOLDER.glob("*.sql"))
    assert rendered < held < shipped / 2, (held, shipped)  # before: 138 KB held of 117


def test_each_query_is_read_as_its_file_has_it_also_from_a_file_replaced_since_indexed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query's text is read from its file when first rendered, at the place the
    index found it. A file replaced under a running process (a package upgraded in
    place) moved its queries: they are found by name, never read from stale offsets."""
    shipped = {f.name: f.read_text(encoding="utf-8") for f in SQL_FOLDER.glob("*.sql")}
    for name, file in ((n, f) for f, text in shipped.items() for n in queries.parse(text)):
        assert queries._text(name) == queries.parse(shipped[file])[name], name
    for file, text in shipped.items():
        (tmp_path / file).write_text(text, encoding="utf-8")
    queries._index()  # indexed before the change, as in a running process
    monkeypatch.setattr(queries, "_folder", lambda: tmp_path)
    first = next(iter(queries.parse(shipped["jobs.sql"])))
    for changed in ("-- a later release: one more line on top\n" + shipped["jobs.sql"],
                    shipped["jobs.sql"].replace("SELECT", "SELECT /* a longer text */")):
        (tmp_path / "jobs.sql").write_text(changed, encoding="utf-8")
        for name in (first, "job_get", "job_claim_any", "fragment_claim_rows"):
            assert queries._text(name) == queries.parse(changed)[name], name
