"""Claiming: the worker's ``fetch`` and ``listen`` threads.

The fetch thread claims batches of due jobs for the free slots (plus a
prefetch, judged from recent job durations) and hands each claim to the slots
(:mod:`jobwarden.worker.slots`). It sleeps on one wake event between claims;
freed slots of a capped host and a stop set it. The ``listen`` thread claims
itself when a NOTIFY says a job was enqueued (one claim at a time: both
threads go through :meth:`Claimer.claim_round`), so an idle worker's claim
leaves from the thread that heard of the job. Polling every
``poll_interval`` is the truth; the NOTIFYs are speed only.

A claim whose reply was lost (the commit may have happened) is resolved by
asking which rows carry the claim's batch id before claiming more, never by
guessing: see :meth:`Claimer._resolve_claim`.

An idle worker's polls back off (issue 31): while its LISTEN connection is
verified (a probe NOTIFY came back on it, which a transaction-mode pooler's
never does), each claim round that finds nothing doubles the wait, from
``poll_interval`` up to the idle pace (``WorkerSettings.idle_seconds``), and
the claim message of such a round also asks when the next pending job comes
due, so a delayed job, a retry or a deferral -- which no NOTIFY announces -- is
still claimed when it comes due. A claim that took anything, and a listener
that is lost or unverified, go back to ``poll_interval``.

Wake-ups go to as many workers as there are jobs (issue 31, migration 0025):
the listen thread also LISTENs on a channel of this worker's own, and each
claim that leaves a slot free, while LISTEN is verified, marks the worker in
``job_wakeups`` with it (:class:`~jobwarden.db.jobs.WakeMark`); a single enqueue
takes one such mark and NOTIFYs that channel alone, or the shared one when no
worker is marked. Before, every idle worker claimed on every enqueue.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Literal

from jobwarden import errors
from jobwarden.db.database import Database, channel_name
from jobwarden.db.hosts import HOSTS_TOPIC
from jobwarden.db.jobs import JOBS_TOPIC, WakeMark
from jobwarden.maintenance.looping import Progress
from jobwarden.settings import PREFETCH_WORK_SECONDS, WorkerSettings
from jobwarden.structs.jobs import ClaimedJob
from jobwarden.worker.capacity import Capacity
from jobwarden.worker.extensions import WorkerExtension

logger = logging.getLogger("jobwarden.worker")

#: What a claim round says to do next (see :meth:`Claimer.claim_round`).
Round = Literal["more", "busy", "failed", "idle"]

#: How long a new LISTEN connection waits for its probe NOTIFY (see Listener.verify).
PROBE_SECONDS = 5.0
#: After a probe that never came back (a transaction-mode pooler): try again this late.
PROBE_RETRY_SECONDS = 60.0
#: A wake-up mark outlives the longest idle sleep by this much (a slow claim on a
#: loaded server), besides twice that sleep: a live idle worker renews it first.
WAKE_MARK_SLACK_SECONDS = 30.0
#: PostgreSQL's longest channel name (NAMEDATALEN - 1 bytes); a longer one fails
#: the enqueue's pg_notify, so a worker whose channel would be longer never marks.
MAX_CHANNEL_BYTES = 63


class Claimer:
    """Claims jobs for one worker's free slots; see the module docstring.

    ``accept`` takes each claimed job (it counts a unit of ``capacity`` itself);
    ``average_duration`` is the slots' moving average of attempt durations (None
    before the first), from which the automatic prefetch is sized.
    """

    def __init__(self, db: Database, settings: WorkerSettings, *, capacity: Capacity,
                 extensions: Sequence[WorkerExtension], stopping: threading.Event,
                 db_state: Callable[[bool], None], accept: Callable[[ClaimedJob], None],
                 average_duration: Callable[[], float | None]) -> None:
        self.db = db
        self.settings = settings
        self.host = settings.host
        self.capacity = capacity
        self.extensions = extensions
        #: Claims lock the host row and honour its cap (the host registry asks for it).
        self.capped_claims = any(ext.caps_claims for ext in extensions)
        self._stopping = stopping
        self._db_state = db_state
        self._accept = accept
        self._average_duration = average_duration
        #: What the fetch loop sleeps on between claims (read afresh on every use).
        self.wake_event = threading.Event()
        #: Set while the LISTEN connection is up (tests wait on it instead of sleeping).
        self.listening = threading.Event()
        #: One claim at a time (the fetch and listen threads both claim).
        self._claim_lock = threading.Lock()
        #: The batch of a claim that failed with its outcome unknown (the commit may
        #: have happened, the reply was lost): resolved by asking before claiming more.
        self._unresolved: uuid.UUID | None = None
        #: Claims failed in a row (the fetch loop's backoff).
        self._failures = 0
        #: Claim rounds in a row that found nothing (the idle backoff).
        self.empty_rounds = 0
        #: When (monotonic) the next pending job comes due, as the last idle claim
        #: said (None: none waits, or not asked; see :meth:`idle_wait`).
        self._next_due_at: float | None = None
        #: Whether the last claim asked when the next job comes due.
        self._due_known = False
        #: The listen thread (its claims may learn of a job due before the fetch loop wakes).
        self._listen_thread: threading.Thread | None = None
        #: LISTEN connections whose probe NOTIFY never came back (a transaction-mode
        #: pooler): the worker then polls every ``poll_interval``.
        self.unheard_probes = 0
        #: The claim round in progress, either thread's (the worker's /healthz reads it).
        self.progress = Progress("claim")
        #: The topic only this worker LISTENs on, and its channel (None: too long a
        #: schema name for one; the worker is then woken on the shared channel only).
        self.wake_topic = f"{JOBS_TOPIC}_{uuid.uuid4().hex[:16]}"
        channel = channel_name(db.schema, self.wake_topic)
        self.wake_channel = channel if len(channel.encode()) <= MAX_CHANNEL_BYTES else None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wake(self) -> None:
        """Claim again now instead of at the next poll."""
        self.wake_event.set()

    def fetch_loop(self) -> None:
        """The ``fetch`` thread: claim for free slots until the worker stops."""
        while not self.stopping:
            outcome = self.claim_round()
            if outcome == "more":
                continue  # probably more due: claim again as soon as slots free up
            if outcome == "busy":
                self.capacity.wait_in_flight_below(self._target(), 0.5)
            elif outcome == "failed":
                # Resume promptly once the database is back.
                self._stopping.wait(min(0.05 * 2 ** min(self._failures, 5), 1.0))
            else:
                self.wake_event.wait(self.idle_wait())
        with self._claim_lock:
            if self.wake_channel is not None:
                try:  # no enqueue may NOTIFY this worker alone any more
                    self.db.jobs.unmark_wakeups(self.wake_channel)
                except errors.DatabaseUnavailable as exc:  # its mark expires by itself
                    logger.warning("cannot remove this worker's wake-up mark: %s", exc)
            if self._unresolved is not None:  # stopping: whatever it took is given back
                try:
                    self._resolve_claim(self._unresolved)
                    self._unresolved = None
                except errors.DatabaseUnavailable as exc:
                    logger.warning("cannot tell what the last claim took (the reaper will): "
                                   "%s", exc)

    def claim_round(self) -> Round:
        """Claim once for the free slots (one thread at a time); what to do next.

        Called by the fetch loop and, on a NOTIFY, by the listen thread itself: the
        claim goes out from the thread that heard of the job, without waking another
        thread first (a hand-off costs a scheduler wake-up, milliseconds on a
        loaded machine). ``"more"``: claim again at once; ``"busy"``: no free slot;
        ``"failed"``: the database is unreachable; ``"idle"``: nothing more now.
        """
        with self._claim_lock:
            self.progress.begin()
            try:
                found = self._claim_round()
            finally:
                self.progress.end()
        if isinstance(found, str):
            return found
        claimed, limit = found
        # Outside the lock: the readiness bookkeeping is not the claim's business.
        self._db_state(True)
        return "more" if claimed and len(claimed) >= limit else "idle"

    def _claim_round(self) -> Round | tuple[list[ClaimedJob], int]:
        """:meth:`claim_round` under the claim lock: what to do next, or (what the
        claim took, how many it asked for) after a claim that was answered."""
        if self.stopping:
            return "idle"
        target = self._target()
        in_flight = self.capacity.in_flight
        if in_flight >= target:
            return "busy"
        free = min(target - in_flight, self.capacity.free)
        slots_free = self.settings.concurrency - in_flight
        # Cleared before the claim, not after: a NOTIFY that arrives while the
        # claim is in flight must still wake the fetch loop's wait.
        self.wake_event.clear()
        try:
            if self._unresolved is not None:
                self._resolve_claim(self._unresolved)
                self._unresolved = None
                return "more"  # then claim as usual, at once
            limit = self._claim_gate(free)
            claimed: list[ClaimedJob] = []
            if limit > 0:
                batch = uuid.uuid4()
                self._unresolved = batch
                claimed = self._claim(limit, batch, self._wake_mark(slots_free))
                self._unresolved = None
                self.empty_rounds = 0 if claimed else self.empty_rounds + 1
            self._failures = 0
        except errors.DatabaseUnavailable as exc:
            self._db_state(False)
            self._failures += 1
            logger.warning("claim failed: %s", exc)
            return "failed"
        for claim in claimed:
            self._accept(claim)
        return claimed, limit

    def _wake_mark(self, slots_free: int) -> WakeMark | None:
        """This worker's wake-up mark for a claim while ``slots_free`` slots are free
        (not counting the prefetch: a job woken for waits in no queue behind
        another), or None: not listening (a NOTIFY to its channel would go
        unheard), stopping, or no channel of its own."""
        if self.wake_channel is None or self.stopping or not self.listening.is_set():
            return None
        longest_sleep = max(self.settings.idle_seconds, self.settings.poll_interval)
        return WakeMark(channel=self.wake_channel, free=max(slots_free, 0),
                        seconds=2 * longest_sleep + WAKE_MARK_SLACK_SECONDS)

    def _claim(self, limit: int, batch: uuid.UUID, wake: WakeMark | None) -> list[ClaimedJob]:
        """The claim; after an empty one, with LISTEN verified, it also asks when the
        next pending job comes due (no transaction of its own: see ``claim_idle``)."""
        if self.capped_claims and self.empty_rounds > 0 and self.listening.is_set():
            claimed, due = self.db.jobs.claim_idle(
                host=self.host, limit=limit, grace_seconds=self.settings.heartbeat_grace,
                queues=self.settings.queues or None, batch=batch, wake=wake)
            self._due_known = True
            known = self._next_due_at
            self._next_due_at = None if due is None else time.monotonic() + due
            if self._next_due_at is not None and (known is None or self._next_due_at < known) \
                    and threading.current_thread() is self._listen_thread:
                # The listen thread heard of a job due sooner than the fetch loop
                # sleeps: wake it to sleep until then instead.
                self.wake_event.set()
            return claimed
        self._due_known = False
        return self.db.jobs.claim(
            host=self.host, limit=limit, grace_seconds=self.settings.heartbeat_grace,
            queues=self.settings.queues or None, host_cap=self.capped_claims, batch=batch,
            wake=wake)

    def idle_wait(self) -> float:
        """How long the fetch loop sleeps after a round that found nothing.

        ``poll_interval`` unless LISTEN is verified and the last claim said when the
        next job comes due; then twice the poll interval per empty round in a row,
        up to the idle pace, and never past the next due job. Why it is safe: an
        enqueue (and a resumed queue, a freed unit of a host's cap) NOTIFYs, and the
        listen thread claims at once; what becomes due without a NOTIFY was asked for.
        """
        base = self.settings.poll_interval
        if not self.listening.is_set():
            return base
        wait = base
        if self._due_known and self.empty_rounds >= 2:
            wait = min(base * 2.0 ** (self.empty_rounds - 1),
                       max(self.settings.idle_seconds, base))
        if self._due_known and self._next_due_at is not None:
            # A little past the due time: the database's clock decides, not ours.
            wait = min(wait, max(self._next_due_at - time.monotonic(), 0.0) + 0.01)
        return wait

    def _target(self) -> int:
        """How many attempts to hold claimed: the slots plus the prefetch."""
        return self.settings.concurrency + self._prefetch()

    def _resolve_claim(self, batch: uuid.UUID) -> None:
        """Accept the jobs a claim took although its reply was lost (given back if stopping).

        The worker chose the claim's batch id, from which the database derived
        the claim tokens: it asks which processing rows carry them, never guesses.
        """
        claimed = self.db.jobs.claims_of_batch(host=self.host, batch=batch,
                                                grace_seconds=self.settings.heartbeat_grace)
        self._db_state(True)
        if claimed:
            logger.warning("recovered %d claim(s) whose reply was lost: job(s) %s",
                           len(claimed), ", ".join(str(c.id) for c in claimed))
        for claim in claimed:
            self._accept(claim)

    def _claim_gate(self, free: int) -> int:
        """How many jobs may be claimed now: each extension may lower the count."""
        for ext in self.extensions:
            free = ext.claim_gate(free)
        return free

    def _prefetch(self) -> int:
        """How many jobs to hold claimed beyond the free slots right now."""
        if self.settings.prefetch is not None:
            return self.settings.max_prefetch
        average = self._average_duration()
        if average is None:
            return self.settings.concurrency
        wanted = int(PREFETCH_WORK_SECONDS * self.settings.concurrency / max(average, 1e-4))
        return min(wanted, self.settings.max_prefetch)

    def outcomes_written(self) -> None:
        """The recorder wrote outcomes: their slots, and units of a host cap, are free.

        The extensions decide what follows: the host registry wakes this fetch
        loop (and the host's other processes) when the host has a cap, since a
        capped claim counts the host's running rows in the database (so it may
        only follow the write) and one that got fewer jobs than it asked for
        would otherwise wait for its next poll with a free slot. Without a cap a
        claim that got fewer than it asked for found the queue empty, and a
        freed slot changes nothing: no claim round per job for nothing.
        """
        for ext in self.extensions:
            try:
                ext.outcomes_written()
            except errors.DatabaseUnavailable as exc:  # speed only: the poll still claims
                logger.warning("after outcomes were written: %s", exc)
            except Exception:
                logger.exception("extension failed after outcomes were written")

    def listen_loop(self) -> None:
        """The ``listen`` thread: a NOTIFY of an enqueue (or a sibling's freed slot) claims.

        It claims itself (:meth:`claim_round`) rather than waking the fetch thread,
        and hands over to it only what needs a loop: more to claim, no free slot, a
        failed claim.
        """
        # A capped host's processes also hear each other's freed slots (payload: host).
        topics: tuple[str, ...] = (JOBS_TOPIC, HOSTS_TOPIC) if self.capped_claims \
            else (JOBS_TOPIC,)
        if self.wake_channel is not None:
            topics += (self.wake_topic,)
        hosts_channel = channel_name(self.db.schema, HOSTS_TOPIC)
        self._listen_thread = threading.current_thread()
        listener = self.db.listener(*topics, lend=True)
        warned = False
        probed_at = 0.0
        try:
            while not self.stopping:
                try:
                    if not listener.verified:
                        self._unheard()
                        if listener.probe_sent and \
                                time.monotonic() - probed_at > PROBE_RETRY_SECONDS:
                            listener.close()  # unheard for long: probe a new connection
                        if not listener.probe_sent:
                            probed_at = time.monotonic()
                            # A probe that comes back late (a loaded server) still
                            # verifies the connection: wait() hears it.
                            if not listener.verify(PROBE_SECONDS):
                                self.unheard_probes += 1
                                if not warned:
                                    logger.warning(
                                        "LISTEN heard no NOTIFY within %gs (a transaction-"
                                        "mode pooler?): polling every %gs until it does; set "
                                        "JOBWARDEN_LISTEN_DSN to a direct DSN for wake-ups",
                                        PROBE_SECONDS, self.settings.poll_interval)
                                    warned = True
                    received = listener.wait(1.0)
                except errors.DatabaseUnavailable:
                    self._unheard()
                    self._stopping.wait(1.0)
                    continue
                except Exception:  # e.g. a pooler that refuses LISTEN: poll only
                    self._unheard()
                    logger.exception("listening for enqueues failed; polling only")
                    return
                if listener.verified and not self.listening.is_set():
                    self.listening.set()  # LISTEN is in place and heard its probe
                    # Claim now: a claim that leaves a slot free marks this worker
                    # for wake-ups, and it may not poll again for a long while.
                    self.wake_event.set()
                if any(channel != hosts_channel or payload == self.host
                       for channel, payload in received) \
                        and self.claim_round() != "idle":
                    self.wake_event.set()
        finally:
            self._unheard()
            listener.close()

    def _unheard(self) -> None:
        """NOTIFYs may not arrive (listener lost or not verified): the fetch loop polls
        every ``poll_interval`` again, starting now rather than after a long idle wait."""
        if self.listening.is_set():
            self.listening.clear()
            self.wake_event.set()
