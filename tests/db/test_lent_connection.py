"""The LISTEN connection a Listener lends to its pool (issue 31), when the listener closes
or reconnects while a borrower's call runs on it (db/pool.py, db/database.py).

Seen on the real control plane: a worker draining on SIGTERM under load logged, from its
last host-registry call, ``can't return connection to pool ..., it doesn't come from any
pool: <psycopg.Connection [BAD]>``. The listener had stopped lending during the call, so
the pool handed its connection to the psycopg pool, which refused it; and the listener,
never given its connection back, would wait for it for ever at its next reconnect.
"""

from __future__ import annotations

import threading

from jobwarden.db.database import Database


def test_a_connection_lent_by_a_listener_that_closed_meanwhile_goes_back_to_it(
        dsn: str) -> None:
    with Database(dsn, min_size=1, max_size=2, timeout=5) as db:
        listener = db.listener("lent_test", lend=True)
        try:
            assert listener.verify(timeout=30)
            assert db.connections.lender is listener
            with db.connection() as conn:
                (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
                lent = conn
                listener.close()  # as a stop (or a lost connection) does, from any thread
            assert lent.closed
            # The listener reconnects and listens again: nothing waits for the connection.
            waited: list[object] = []
            again = threading.Thread(target=lambda: waited.append(listener.wait(0.1)),
                                     daemon=True)
            again.start()
            again.join(timeout=60)
            assert not again.is_alive(), "the listener waits for its lent connection"
            assert waited == [[]]
            assert listener.verify(timeout=30)
            with db.connection() as conn:  # lent again: the new LISTEN connection
                (other,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
            assert other != pid
            assert db.row("db_now") is not None
        finally:
            listener.close()
