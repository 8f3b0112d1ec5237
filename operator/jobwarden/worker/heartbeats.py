"""Heartbeats: keep a worker's claims alive, notice the ones it lost, enforce deadlines.

One :class:`Heartbeater` per worker. The worker's ``heartbeat`` thread calls it
for every active attempt; a tick (``jobwarden tick`` or the ``/tick`` route)
calls the same object for the one attempt it runs, so both heartbeat, fence,
cancel, time out and renew extension state (leases) in exactly the same way.

A claim the database no longer acknowledges was reaped elsewhere: the attempt
is marked fenced (its outcome write will be refused and counted). A cancel
request (``jobwarden jobs cancel``) is passed on to the attempt, whose next
``Job.heartbeat()`` raises. Extensions get the attempts still alive after each
batch (lease renewal).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from jobwarden import errors
from jobwarden.db.database import Database
from jobwarden.maintenance.looping import Progress
from jobwarden.worker.context import Attempt
from jobwarden.worker.extensions import WorkerExtension

logger = logging.getLogger("jobwarden.worker")


def heartbeat_one(db: Database, attempt: Attempt, *,
                  grace_seconds: float) -> tuple[bool, bool]:
    """Heartbeat one claim for ``Job.heartbeat()``: (still ours, cancel requested).

    "Still ours" is the database's answer as of when it ran the statement, and
    it holds for the grace from then, not from when it is read. A process paused
    (GC, SIGSTOP, a frozen VM) while the answer was on its way reads it after the
    claim may have been reaped and claimed by another worker. An "alive" that
    arrives a grace or more after the question left proves nothing, so the
    question is asked again; "not alive" is final whenever it arrives. Job code
    acting on a stale "alive" would run on past its reap; the outcome write is
    fenced either way, the effects in between are not (docs/jobs.md).
    """
    claim = attempt.claim
    while True:
        asked = time.monotonic()
        ack = db.jobs.heartbeat_many([(claim.id, claim.claim_token)],
                                     grace_seconds=grace_seconds)
        alive, waited = claim.id in ack.alive, time.monotonic() - asked
        if not alive or waited < grace_seconds:
            return alive, claim.id in ack.cancel_requested
        logger.info("job %d attempt %d: the heartbeat's answer came %.1f s after it was "
                    "asked (was the process paused?); asking again", claim.id, claim.attempt,
                    waited)


class Heartbeater:
    """Batch heartbeats and deadline checks for a set of attempts (one worker's)."""

    def __init__(self, db: Database, *, grace_seconds: float,
                 extensions: Sequence[WorkerExtension],
                 db_state: Callable[[bool], None],
                 timed_out: Callable[[Attempt], None]) -> None:
        self._db = db
        self._grace = grace_seconds
        self._extensions = extensions
        self._db_state = db_state
        self._timed_out = timed_out
        #: The heartbeat loop's round in progress (the worker's /healthz reads it).
        self.progress = Progress("heartbeat")

    def one(self, attempt: Attempt) -> tuple[bool, bool]:
        """``Job.heartbeat()`` inside perform: (still ours, cancel requested); may raise."""
        return heartbeat_one(self._db, attempt, grace_seconds=self._grace)

    def run(self, attempts: Callable[[], Sequence[Attempt]], *, interval: float,
            until: threading.Event, poll: float = 0.1,
            tracked: Callable[[Attempt], bool] = lambda _attempt: True) -> None:
        """Enforce deadlines every ``poll`` and heartbeat every ``interval`` until ``until``.

        The worker's ``heartbeat`` thread runs it over every attempt in hand; a
        tick runs it over its one attempt, so both behave the same.
        """
        next_beat = time.monotonic() + interval
        progress = self.progress
        while not until.is_set():
            progress.begin()
            now = time.monotonic()
            self.enforce_deadlines(attempts(), now)
            if now >= next_beat:
                next_beat = now + interval
                self.beat(attempts(), tracked=tracked)
            progress.end()
            until.wait(poll)

    def enforce_deadlines(self, attempts: Sequence[Attempt], now: float) -> None:
        """Time out every attempt past its hard deadline (the callback stops it)."""
        for attempt in attempts:
            if attempt.timed_out(now):
                self._timed_out(attempt)

    def beat(self, attempts: Sequence[Attempt],
             tracked: Callable[[Attempt], bool] = lambda _attempt: True) -> None:
        """Heartbeat ``attempts`` in one statement; mark lost claims; run extensions.

        ``tracked`` says whether an attempt is still the caller's at the time of
        the answer (the worker forgets an attempt once its outcome was written).
        """
        if not attempts:
            return
        try:
            ack = self._db.jobs.heartbeat_many(
                [(a.claim.id, a.claim.claim_token) for a in attempts],
                grace_seconds=self._grace,
            )
            self._db_state(True)
        except errors.DatabaseUnavailable as exc:
            self._db_state(False)
            logger.warning("heartbeat failed: %s", exc)
            return
        for attempt in attempts:
            # An attempt whose outcome is settled may have just been written (and so is
            # no longer processing): only an unsettled one can have lost its claim here.
            # A settled one that did lose it is fenced by its own write.
            if attempt.claim.id not in ack.alive and tracked(attempt) \
                    and attempt.outcome is None and not attempt.fenced:
                attempt.fenced = True
                logger.warning("job %d attempt %d lost its claim (reaped elsewhere)",
                               attempt.claim.id, attempt.claim.attempt)
            if attempt.claim.id in ack.cancel_requested:
                attempt.cancel_requested = True
        alive = [a for a in attempts if a.claim.id in ack.alive]
        for extension in self._extensions:
            try:
                extension.heartbeat(alive)
            except Exception:
                logger.exception("heartbeat extension %s failed", type(extension).__name__)


