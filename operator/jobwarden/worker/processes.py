"""Process isolation: each slot runs its attempts in a long-lived child process.

Why: a sync job that blocks in C code or spins cannot be stopped from another
thread. In a child process it can: at the deadline the parent kills the child
(SIGKILL) and starts a fresh one, so the attempt really stops and the slot is
free again. Children are reused across attempts, so the cost is one process
start per slot, not per job. Data and results cross the pipe as JSON text,
which is what the database stores anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import multiprocessing
import multiprocessing.connection
import threading
import time
from typing import Any, cast

from jobwarden import errors
from jobwarden.jobs import definitions
from jobwarden.structs.policies import FailureReason
from jobwarden.worker.context import Attempt, AttemptContext, Cancelled, Failed, Outcome, Succeeded
from jobwarden.worker.execution import describe, failure_from, perform_async, prepare
from jobwarden.worker.heartbeats import heartbeat_one

_CTX = multiprocessing.get_context("spawn")


class _ChildContext:
    """Heartbeats from inside the child, on its own small connection pool."""

    def __init__(self, db: Any, attempt: Attempt, grace: float) -> None:
        self._db = db
        self._attempt = attempt
        self._grace = grace

    def beat(self, attempt: Attempt) -> tuple[bool, bool]:
        return heartbeat_one(self._db, attempt, grace_seconds=self._grace)


def _child_main(conn: multiprocessing.connection.Connection, apps: list[str],
                dsn: str | None, schema: str) -> None:
    for app in apps:
        importlib.import_module(app)
    conn.send(("ready",))
    db = None
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        claim, grace = request
        attempt = Attempt(claim)
        attempt.start(thread_id=None)
        try:
            job_class = definitions.resolve(claim.job_class)
            if db is None and dsn:
                from jobwarden.db.database import Database

                db = Database(dsn, schema=schema, min_size=0, max_size=1)
            context = AttemptContext(attempt, _ChildContext(db, attempt, grace).beat, db=db) \
                if db is not None else None
            instance = prepare(job_class, attempt, context)
            if definitions.is_async(job_class):
                result = asyncio.run(perform_async(instance, claim.data, claim.timeout_seconds))
            else:
                instance.before_perform(claim.data)
                result = instance.perform(claim.data)
                instance.after_perform(claim.data, result)
            conn.send(("ok", json.dumps(result, default=str)))
        except BaseException as exc:
            outcome = failure_from(exc, attempt)
            if isinstance(outcome, Cancelled):
                conn.send(("cancelled", outcome.error))
            elif isinstance(outcome, Failed):
                conn.send(("failed", outcome.error, outcome.reason, outcome.retryable))
            else:  # pragma: no cover - failure_from returns only the two above
                conn.send(("failed", describe(exc), "error", True))


class _Child:
    def __init__(self, apps: list[str], dsn: str | None, schema: str) -> None:
        parent, child = _CTX.Pipe()
        self.conn = parent
        self.process = _CTX.Process(
            target=_child_main, args=(child, apps, dsn, schema), daemon=True,
            name="jobwarden-child",
        )
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the child to finish importing the apps (not counted in a job's timeout)."""
        if not self.ready and self.conn.poll(timeout):
            try:
                self.ready = self.conn.recv() == ("ready",)
            except (EOFError, OSError):
                return False
        return self.ready

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class ProcessIsolation:
    def __init__(self, *, apps: list[str], dsn: str | None, schema: str,
                 heartbeat_grace: float) -> None:
        self._apps = apps
        self._dsn = dsn
        self._schema = schema
        self._grace = heartbeat_grace
        self._children: dict[int, _Child] = {}
        self._lock = threading.Lock()

    def _child(self) -> _Child:
        ident = threading.get_ident()
        with self._lock:
            child = self._children.get(ident)
            if child is None or not child.process.is_alive():
                child = _Child(self._apps, self._dsn, self._schema)
                self._children[ident] = child
            return child

    def _discard(self) -> None:
        with self._lock:
            child = self._children.pop(threading.get_ident(), None)
        if child is not None:
            child.kill()

    def run(self, attempt: Attempt, job_class: type[definitions.Job],
            context: AttemptContext) -> Outcome:
        # The hard timeout counts from when the job is handed over, not from the spawn
        # of a fresh child (seconds under load): disarm the watchdog until then.
        attempt.deadline = None
        child = self._child()
        if not child.wait_ready(timeout=120):
            code = child.process.exitcode
            self._discard()
            return Failed(error=f"the job's child process did not start (exit code {code}); "
                                "check that the --app modules import", reason="error")
        attempt.deadline = time.monotonic() + attempt.claim.timeout_seconds
        try:
            child.conn.send((attempt.claim, self._grace))
        except (OSError, ValueError) as exc:
            self._discard()
            return Failed(error=f"could not hand the job to its child process: {exc}",
                          reason="error")
        remaining = (attempt.deadline or time.monotonic()) - time.monotonic()
        if not child.conn.poll(max(remaining, 0.0)):
            self._discard()  # SIGKILL: the attempt really stops
            return failure_from(errors.JobTimeout("timeout"), attempt)
        try:
            reply = child.conn.recv()
        except (EOFError, OSError):
            code = child.process.exitcode
            self._discard()
            return Failed(error=f"the job's child process died (exit code {code}, pid "
                                f"{child.process.pid})", reason="error")
        kind = reply[0]
        if kind == "ok":
            return Succeeded(result=json.loads(reply[1]))
        if kind == "cancelled":
            return Cancelled(error=reply[1])
        return Failed(error=reply[1], reason=cast(FailureReason, reply[2]), retryable=reply[3])

    def interrupt(self, attempt: Attempt) -> None:
        """Nothing to do: the slot thread kills the child at the deadline itself."""

    def close(self) -> None:
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        for child in children:
            with contextlib.suppress(OSError, ValueError):
                child.conn.send(None)
            child.process.join(timeout=1)
            child.kill()


def child_pids(isolation: ProcessIsolation) -> list[int]:
    """For tests and status: the pids of the live children."""
    return [c.process.pid for c in isolation._children.values() if c.process.pid]
