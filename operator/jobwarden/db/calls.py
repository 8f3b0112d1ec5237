"""Hot named queries as protocol-level prepared statements named by their text.

Why: a lease pair is two single-row statements run thousands of times a second
(``leases.sql`` lease_take and lease_free). Unprepared, each is parsed and
planned on every call, and the client goes through psycopg's general cursor
path (query conversion, a parse message per call, result bookkeeping). A
protocol-level prepared statement (Parse once per connection, then Bind/Execute
only) removes both, with no quoting of values into SQL text (the SQL-level
``EXECUTE`` of ``db/prepared.py`` costs the client more than it saves on a
statement this small). Results come back in binary (no timestamp formatting on
the server, no parsing on the client).

Why not psycopg's own ``prepare=True``: its statements are named ``_pg3_0``,
``_pg3_1``, ... per connection, so behind a transaction-mode pooler that does
not track prepared statements (PgBouncer before 1.21, or with
``max_prepared_statements = 0``) a Bind can reach a server connection where
another client prepared a *different* statement under that name, and run it.
Here a statement's name is derived from its text (:func:`prepared_form`, the
same naming as the SQL-level ones), so a same-named statement found on any
server connection is this exact statement. A Bind that reaches a server
connection without it fails with ``invalid_sql_statement_name`` before anything
runs; the caller then runs the call as plain text (nothing lost, one more round
trip) and, after :data:`MISSES_BEFORE_PLAIN` such misses, sends plain text for
good (the pool is behind a pooler that loses statements). PgBouncer 1.21+ with
``max_prepared_statements`` set carries them and never misses.
"""

from __future__ import annotations

import dataclasses

import psycopg
import psycopg.errors
from psycopg import adapt, generators, pq

from jobwarden.db.basics import Connection, Params, Row
from jobwarden.db.prepared import prepared_form, value_adapter

__all__ = ["MISSES_BEFORE_PLAIN", "PreparedCall", "run_prepared"]

#: Statements a pool's connections lost (a pooler hopping between server
#: connections) before that pool sends plain text only.
MISSES_BEFORE_PLAIN = 3

_FATAL = pq.ExecStatus.FATAL_ERROR
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_MISSING = b"26000"  # invalid_sql_statement_name: not on this server connection
_DUPLICATE = b"42P05"  # duplicate_prepared_statement: there already, same text by its name


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedCall:
    """One named query in both forms: prepared (name, ``$n`` body) and plain text."""

    statement: bytes
    body: bytes
    order: tuple[str, ...]
    formats: tuple[adapt.PyFormat, ...]
    text: str

    @classmethod
    def of(cls, name: str, text: str) -> PreparedCall:
        statement, order, prepare = prepared_form(name, text)
        body = prepare.removeprefix(f"PREPARE {statement} AS ")
        return cls(statement=statement.encode(), body=body.encode(), order=order,
                   formats=(adapt.PyFormat.TEXT,) * len(order), text=text)


class _ConnectionState:
    """What one pooled connection holds: its prepared statements, its value adapter."""

    __slots__ = ("encoding", "prepared", "transformer")

    def __init__(self, conn: Connection) -> None:
        self.prepared: set[bytes] = set()
        self.transformer = value_adapter(conn)
        self.encoding = conn.info.encoding


def run_prepared(conn: Connection, call: PreparedCall, params: Params) -> list[Row] | None:
    """The rows of ``call`` run as a prepared statement on ``conn``; None if it was lost.

    None: the server connection did not hold the statement (a pooler, a
    ``DEALLOCATE``); nothing ran, and the caller runs ``call.text`` instead.
    Other errors are raised as psycopg's exceptions, as a cursor would.
    """
    state: _ConnectionState | None = getattr(conn, "_jobwarden_calls", None)
    if state is None:
        state = _ConnectionState(conn)
        conn._jobwarden_calls = state  # type: ignore[attr-defined]
    pgconn = conn.pgconn
    if call.statement not in state.prepared:
        pgconn.send_prepare(call.statement, call.body)
        _check(conn.wait(generators.execute(pgconn)), state, allow=_DUPLICATE)
        state.prepared.add(call.statement)
    tx = state.transformer
    values = tx.dump_sequence([params[key] for key in call.order], call.formats)
    pgconn.send_query_prepared(call.statement, values, result_format=pq.Format.BINARY)
    result = _check(conn.wait(generators.execute(pgconn)), state, allow=_MISSING)
    if result is None:
        state.prepared.discard(call.statement)
        return None
    tx.set_pgresult(result)
    return tx.load_rows(0, result.ntuples, tuple)


def _check(results: list[pq.abc.PGresult], state: _ConnectionState,
           allow: bytes) -> pq.abc.PGresult | None:
    """The one result, None when it failed with the SQLSTATE ``allow``; else raise."""
    result = results[-1]
    if result.status == _FATAL:
        if result.error_field(_SQLSTATE) == allow:
            return None
        raise psycopg.errors.error_from_result(result, encoding=state.encoding)
    return result
