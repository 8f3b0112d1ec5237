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

__all__ = ["first_line", "translate_errors"]


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn driver exceptions into Jobwarden's own, so callers never import psycopg."""
    try:
        yield
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName,
            psycopg.errors.UndefinedObject) as exc:
        raise errors.SchemaMissing(
            f"the Jobwarden schema is missing or incomplete ({exc.diag.message_primary}); "
            "run `jobwarden migrate`"
        ) from exc
    except PoolTimeout as exc:
        raise errors.DatabaseUnavailable(f"no database connection available: {exc}") from exc
    except psycopg.OperationalError as exc:
        raise errors.DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
