"""What the console takes from a request, checked before any view or action runs.

Every query parameter, path parameter and form field is text PostgreSQL must be
able to hold: a NUL character (or a lone surrogate) reached the database as a
raw ``psycopg.DataError`` and a 500. Checked here once, for every route and
every field, so a new page or action is covered without remembering to. Ids
are checked by ``pages.parse_job_id`` (a number beyond ``bigint`` was
``NumericValueOutOfRange``).
Each refusal is an :class:`~jobwarden.errors.InvalidInput` (a ValueError: the
page or action answers 400 and changes nothing) that names the field, never
echoing more than a few characters of the value.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobwarden import errors, textrules


def check_fields(kind: str, items: Iterable[tuple[str, object]]) -> None:
    """Every (name, value) of one kind of input ("query parameter", "form field"...)."""
    for key, value in items:
        found = textrules.problem(key)
        if found is not None:
            raise errors.InvalidInput(f"the name of a {kind} {found}")
        if isinstance(value, str):
            found = textrules.problem(value)
            if found is not None:
                raise errors.InvalidInput(f"the {kind} {textrules.echo(key)} {found}")
