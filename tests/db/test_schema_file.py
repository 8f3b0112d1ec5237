"""operator/jobwarden/db/schema.sql is exactly the schema the migrations make.

A migration added (or edited) without regenerating the file fails here with the
difference and the command that rewrites it. The dump comes from an embedded
PostgreSQL of this test's own, with that package's ``pg_dump``: the same server
and dump versions the file was generated with, whatever server the rest of the
suite uses (tests/support/schemadump.py).
"""

from __future__ import annotations

import difflib

import pytest

from tests.support import postgres, schemadump

#: Enough of a diff to see what changed, short enough to read in a test report.
MAX_DIFF_LINES = 120


def test_the_committed_schema_file_is_what_the_migrations_make() -> None:
    server = postgres.EmbeddedServer()
    try:
        generated = schemadump.render(server)
    finally:
        server.close()
    committed = schemadump.SCHEMA_FILE.read_text(encoding="utf-8")
    if committed != generated:
        diff = list(difflib.unified_diff(
            committed.splitlines(), generated.splitlines(),
            "operator/jobwarden/db/schema.sql (committed)",
            "operator/jobwarden/db/schema.sql (from the migrations)", lineterm=""))
        shown = diff[:MAX_DIFF_LINES]
        if len(diff) > MAX_DIFF_LINES:
            shown.append(f"... {len(diff) - MAX_DIFF_LINES} more line(s)")
        pytest.fail("db/schema.sql is stale: the migrations make another schema.\n"
                    f"Regenerate it from the repository root: {schemadump.COMMAND}\n\n"
                    + "\n".join(shown), pytrace=False)


def test_normalizing_keeps_the_schema_and_drops_what_the_versions_say() -> None:
    def dump(version: str, key: str) -> str:
        return (
            "--\n-- PostgreSQL database dump\n--\n\n"
            f"\\restrict {key}\n\n"
            f"-- Dumped from database version {version}\n"
            f"-- Dumped by pg_dump version {version}\n\n"
            "SET statement_timeout = 0;\n"
            "SELECT pg_catalog.set_config('search_path', '', false);\n\n"
            "--\n-- Name: jobs; Type: TABLE; Schema: jobwarden; Owner: -\n--\n\n"
            "CREATE TABLE jobwarden.jobs (\n    id bigint NOT NULL\n);\n\n\n"
            "SET default_table_access_method = heap;\n\n"
            f"--\n-- PostgreSQL database dump complete\n--\n\n\\unrestrict {key}\n")

    eighteen = schemadump.normalize(dump("18.6", "AqdarfbkNK"))
    assert eighteen == schemadump.normalize(dump("17.2", "Zx81Lq0p"))
    assert eighteen == (
        "--\n-- Name: jobs; Type: TABLE; Schema: jobwarden\n--\n\n"
        "CREATE TABLE jobwarden.jobs (\n    id bigint NOT NULL\n);\n")
