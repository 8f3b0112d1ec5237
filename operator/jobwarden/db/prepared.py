"""Named queries as SQL-level prepared statements, for the one-round-trip message.

Why: :meth:`Database.in_one_round_trip` sends ``BEGIN; ...; COMMIT`` as one
simple-protocol message, and the simple protocol parses and plans every
statement every time. For the claim (a statement of five CTEs) that was most of
the server's share of an idle worker's enqueue-to-start time (planning alone
0.3 ms, against 0.1-0.2 ms of execution). ``PREPARE`` once per connection and
``EXECUTE`` in the message keeps one round trip and lets the server reuse the
parse and (once it judges a generic plan no worse) the plan.

Pooler-safe by construction: a statement's name is derived from its text (so a
same-named statement found on any server connection is this exact statement),
and a transaction-mode pooler that hands the message to a server connection
without it fails the whole transaction with ``invalid_sql_statement_name``
before anything commits: the caller then falls back to plain text for good
(:class:`PreparedStatements.disable`), nothing lost.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import weakref
import zlib

import psycopg
from psycopg import adapt
from psycopg.abc import Transformer

from jobwarden.db.basics import Connection, Params

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@functools.lru_cache(maxsize=64)
def prepared_form(name: str, text: str) -> tuple[str, tuple[str, ...], str]:
    """(statement name, parameter names in $n order, the PREPARE) for one query text."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    body = _PLACEHOLDER.sub(number, text).replace("%%", "%")
    # Two zlib checksums (64 bits) tell the texts of one name apart; hashlib would load
    # OpenSSL (0.6 MiB resident) on every worker's first capped claim (structs/digests.py).
    data = text.encode()
    digest = f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"
    statement = f"jw_{name[:40]}_{digest}"
    return statement, tuple(order), f"PREPARE {statement} AS {body}"


class PreparedStatements:
    """Which pooled connections hold which prepared statements; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: weakref.WeakKeyDictionary[Connection, set[str]] = \
            weakref.WeakKeyDictionary()
        #: False once a pooler lost a statement: plain text from then on.
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False

    def execute_bytes(self, conn: Connection, name: str, text: str,
                      params: Params | None) -> bytes:
        """``EXECUTE <statement>(<literals>)`` for ``text``, prepared on ``conn`` first.

        The literals are quoted by the connection's own value adapter: those
        ``ClientCursor.mogrify`` writes (it calls the same ``Transformer.as_literal``),
        without building a cursor and converting a query per call: a third of the
        client's cost of quoting a claim's values.
        """
        statement, order = self._ready(conn, name, text)
        if not order:
            return b"EXECUTE " + statement.encode()
        values = params or {}
        literal = value_adapter(conn).as_literal
        return b"".join((b"EXECUTE ", statement.encode(), b"(",
                         b", ".join([literal(values[key]) for key in order]), b")"))

    def _ready(self, conn: Connection, name: str, text: str) -> tuple[str, tuple[str, ...]]:
        """The statement's name and parameter order, ``PREPARE``d on ``conn`` first."""
        statement, order, prepare = prepared_form(name, text)
        with self._lock:
            held = self._held.setdefault(conn, set())
            ready = statement in held
        if not ready:
            # Already there under this name means this very text (a pooler's server
            # connection that another client prepared it on).
            with contextlib.suppress(psycopg.errors.DuplicatePreparedStatement):
                conn.execute(prepare.encode())  # bytes: no client-side parameters
            with self._lock:
                held.add(statement)
        return statement, order


def value_adapter(conn: Connection) -> Transformer:
    """The connection's value adapter, kept on it: quotes values as SQL literals, dumps
    the parameters of prepared calls (``db/calls.py``) and loads the rows of results
    read outside a cursor (``Database.in_one_round_trip``, the prepared calls)."""
    tx: Transformer | None = getattr(conn, "_jobwarden_literals", None)
    if tx is None:
        tx = adapt.Transformer(conn)
        conn._jobwarden_literals = tx  # type: ignore[attr-defined]
    return tx
