"""The names every module of ``db/`` shares: row and connection types, schema naming.

Apart from the ``Database`` facade (``database.py``), which builds the table
modules: they and the facade both import these, so nothing in ``db/`` imports
the module that imports it (no cycle).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import psycopg

from jobwarden import errors

__all__ = ["DEFAULT_SCHEMA", "Connection", "Params", "Row", "channel_name", "checked_schema"]

Row = tuple[Any, ...]
Params = Mapping[str, Any]
Connection = psycopg.Connection[Row]

DEFAULT_SCHEMA = "jobwarden"
#: Schema names are identifiers we also embed in regclass literals: keep them plain.
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def channel_name(schema: str, topic: str) -> str:
    """NOTIFY channel per schema, so two apps sharing a database don't wake each other."""
    return f"{schema}_{topic}"


def checked_schema(schema: str) -> str:
    """``schema`` if it is a plain identifier (both databases, sync and asyncio, take it
    from configuration); ConfigurationError otherwise."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise errors.ConfigurationError(
            f"invalid schema name {schema!r}: use letters, digits and underscores, "
            "starting with a letter or underscore (at most 63 characters)"
        )
    return schema
