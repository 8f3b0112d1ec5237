"""``python -m bench.silence``: how long calls wait on a silent database, and recovery.

On a private embedded PostgreSQL (or ``--dsn``), through the test suite's
silent relay (tests/support/relay.py: bytes swallowed, sockets open, then only
new connections forwarded), with the default call bounds unless ``--quick``:

- per kind of call, the seconds from a call made into the silence to its
  ``DatabaseUnavailable`` (the bound, plus up to the watchdog's tick);
- a client: seconds from the relay resuming to its first answered enqueue,
  retrying on ``DatabaseUnavailable``;
- an asyncio client with four pooled connections and one enqueue made into the
  silence: the same, and how many calls failed after the resume;
- an in-process worker with jobs in flight, silent for ``--silence`` seconds
  (60 s by default, as in issue 26): seconds from the relay resuming to every
  job in flight and a job enqueued during the silence being completed.

Nothing is asserted (tests/chaos/test_silence.py specifies the behaviour).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import jobwarden
from jobwarden import errors
from jobwarden.assembly import build_worker
from jobwarden.db.asyncdatabase import AsyncDatabase
from jobwarden.db.database import Database
from jobwarden.db.deadlines import CallBounds
from jobwarden.settings import WorkerSettings
from tests.support.postgres import DatabaseFactory, EmbeddedServer
from tests.support.relay import SilentRelay


def _abandoned_after(dsn: str, bounds: CallBounds, kind: str,
                     call: Callable[[Database], object]) -> float:
    """Seconds a call made into the silence took to raise DatabaseUnavailable."""
    with SilentRelay(dsn) as relay, Database(relay.dsn, min_size=1, max_size=2,
                                             bounds=bounds) as db:
        call(db)  # warm: a pooled connection through the relay
        relay.silence()
        started = time.monotonic()
        try:
            call(db)
        except errors.DatabaseUnavailable:
            return time.monotonic() - started
        raise RuntimeError(f"a {kind} call into the silence was answered")


def _calls() -> dict[str, Callable[[Database], object]]:
    owner = uuid.uuid4().hex
    return {
        "call (an enqueue)": lambda db: jobwarden.Client(database=db).enqueue(
            Nothing, check=False),
        "claim": lambda db: db.jobs.claim(host="bench", limit=1, grace_seconds=60),
        "heartbeat": lambda db: db.jobs.heartbeat_many([(1, uuid.uuid4())], grace_seconds=60),
        "record": lambda db: db.jobs.mark_cancelled(job_id=1, claim_token=uuid.uuid4(),
                                                    error="bench"),
        "lease (acquire)": lambda db: db.leases.try_acquire(name=f"bench-{owner}",
                                                            owner=owner, ttl_seconds=30),
    }


class Nothing(jobwarden.Job):
    """The job the measurements enqueue and run."""

    def perform(self, data: object) -> None:
        return None


def _client_recovery(dsn: str, bounds: CallBounds, silence: float) -> float:
    with SilentRelay(dsn) as relay, Database(relay.dsn, min_size=1, max_size=4,
                                             bounds=bounds) as db:
        client = jobwarden.Client(database=db)
        client.enqueue(Nothing, check=False)
        relay.silence()
        threading.Event().wait(silence)  # the silence's length, not a wait for a state
        relay.resume()
        resumed = time.monotonic()
        while True:
            try:
                client.enqueue(Nothing, check=False)
                return time.monotonic() - resumed
            except errors.DatabaseUnavailable:
                continue


def _async_client_recovery(dsn: str, bounds: CallBounds, silence: float
                            ) -> dict[str, float]:
    async def scenario() -> dict[str, float]:
        with SilentRelay(dsn) as relay:
            database = AsyncDatabase(relay.dsn, min_size=1, max_size=4, bounds=bounds)
            async with jobwarden.AsyncClient(database=database) as client:
                await asyncio.gather(*(client.enqueue(Nothing, check=False) for _ in range(4)))
                relay.silence()
                started = time.monotonic()
                try:
                    await client.enqueue(Nothing, check=False)
                    raise RuntimeError("an asyncio enqueue into the silence was answered")
                except errors.DatabaseUnavailable:
                    into = time.monotonic() - started
                await asyncio.sleep(max(silence - into, 0.0))  # the silence's length
                relay.resume()
                resumed = time.monotonic()
                failed = 0
                while True:
                    try:
                        await client.enqueue(Nothing, check=False)
                        return {"call into the silence": into,
                                "first answer": time.monotonic() - resumed,
                                "calls failed after the resume": failed}
                    except errors.DatabaseUnavailable:
                        failed += 1

    return asyncio.run(scenario())


def _worker_recovery(dsn: str, bounds: CallBounds, silence: float) -> dict[str, float]:
    with SilentRelay(dsn) as relay:
        db = Database(relay.dsn, min_size=2, max_size=14, bounds=bounds)
        worker = build_worker(db, WorkerSettings(host="bench-silence", concurrency=4,
                                                 poll_interval=0.2))
        worker.start()
        try:
            with jobwarden.Client(dsn) as client:
                in_flight = [client.enqueue(Nap, {"seconds": 2}).id for _ in range(4)]
                _wait(lambda: len(worker.active()) == 4, 60)
                relay.silence()
                later = client.enqueue(Nothing).id
                threading.Event().wait(silence)
                relay.resume()
                resumed = time.monotonic()
                done = [*in_flight, later]
                _wait(lambda: all(client.job(i).status == "completed" for i in done), 600)
                completed = time.monotonic() - resumed
                ok = _wait(lambda: worker.liveness()[0] and worker.readiness()[0], 600)
                return {"every job completed": completed,
                        "ready again": time.monotonic() - resumed if ok else -1.0}
        finally:
            worker.stop(timeout=10)
            db.close()


class Nap(jobwarden.Job):
    """A job in flight during the silence: it sleeps, touching nothing."""

    def perform(self, data: dict[str, float]) -> None:
        time.sleep(data["seconds"])


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


#: The measurements ``--parts`` chooses from, in the order they run.
PARTS = ("calls", "client", "async", "worker")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.silence", description=__doc__)
    parser.add_argument("--dsn", help="a server to use (default: a private embedded one)")
    parser.add_argument("--silence", type=float, default=60.0,
                        help="seconds of silence for the recovery figures (default 60)")
    parser.add_argument("--quick", action="store_true",
                        help="bounds of 1-2 s and 5 s of silence: a smoke test")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"which measurements, comma-separated (default: all of "
                             f"{','.join(PARTS)})")
    parser.add_argument("--out", help="also write the results (JSON) to this file")
    args = parser.parse_args(argv)
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    if not parts <= set(PARTS):
        parser.error(f"--parts: unknown {', '.join(sorted(parts - set(PARTS)))}")
    bounds = CallBounds(call=2, claim=2, heartbeat=1, record=2, lease=1) if args.quick \
        else CallBounds()
    silence = 5.0 if args.quick else args.silence
    server = None if args.dsn else EmbeddedServer()
    factory = DatabaseFactory(args.dsn or server.dsn, tag="silence")  # type: ignore[union-attr]
    try:
        results: dict[str, object] = {"bounds": dataclasses.asdict(bounds),
                                      "silence_seconds": silence}
        abandoned: dict[str, float] = {}
        for kind, call in _calls().items() if "calls" in parts else ():
            dsn = factory.create()
            try:
                abandoned[kind] = round(_abandoned_after(dsn, bounds, kind, call), 2)
            finally:
                factory.drop(dsn)
            print(f"{kind}: DatabaseUnavailable after {abandoned[kind]:.2f} s", flush=True)
        if abandoned:
            results["abandoned_after_seconds"] = abandoned
        if "client" in parts:
            dsn = factory.create()
            try:
                results["client_recovery_seconds"] = round(
                    _client_recovery(dsn, bounds, silence), 2)
            finally:
                factory.drop(dsn)
            print(f"client: first answer {results['client_recovery_seconds']} s after the "
                  f"resume", flush=True)
        if "async" in parts:
            dsn = factory.create()
            try:
                results["async_client_recovery_seconds"] = {
                    key: round(value, 2)
                    for key, value in _async_client_recovery(dsn, bounds, silence).items()}
            finally:
                factory.drop(dsn)
            print(f"asyncio client: {results['async_client_recovery_seconds']} (seconds)",
                  flush=True)
        if "worker" in parts:
            dsn = factory.create()
            try:
                results["worker_recovery_seconds"] = {
                    key: round(value, 2)
                    for key, value in _worker_recovery(dsn, bounds, silence).items()}
            finally:
                factory.drop(dsn)
            print(f"worker: {results['worker_recovery_seconds']} (seconds after the resume)")
        print(json.dumps(results))
        if args.out:
            with open(args.out, "w", encoding="utf-8") as out:
                json.dump(results, out, indent=1)
                out.write("\n")
        return 0
    finally:
        factory.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
