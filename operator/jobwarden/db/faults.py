"""Driver errors turned into Jobwarden's own, in one place.

Its own module (not part of the ``Database`` facade) so the table modules can use
it without importing the facade that builds them: no import cycle inside ``db/``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout

from jobwarden import errors

__all__ = ["first_line", "translate_errors", "translated"]


#: Errors meaning the schema is not (fully) there: a table, schema, type or
#: function (migration 0014's lease functions) a named query needs is missing.
_SCHEMA_ERRORS = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName,
                  psycopg.errors.UndefinedObject, psycopg.errors.UndefinedFunction)


def translated(exc: BaseException) -> errors.JobwardenError | None:
    """Jobwarden's own error for a driver exception, or None to let it through.

    The one rule, shared by :func:`translate_errors` and the statement fast path
    of ``db/pool.py`` (which avoids a context manager per statement).
    """
    if isinstance(exc, _SCHEMA_ERRORS):
        return errors.SchemaMissing(
            f"the Jobwarden schema is missing or incomplete ({exc.diag.message_primary}); "
            "run `jobwarden migrate`"
        )
    if isinstance(exc, PoolTimeout):
        return errors.DatabaseUnavailable(f"no database connection available: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return errors.DatabaseUnavailable(f"database unavailable: {first_line(exc)}")
    return None


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn driver exceptions into Jobwarden's own, so callers never import psycopg."""
    try:
        yield
    except (*_SCHEMA_ERRORS, PoolTimeout, psycopg.OperationalError) as exc:
        mine = translated(exc)
        assert mine is not None
        raise mine from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
