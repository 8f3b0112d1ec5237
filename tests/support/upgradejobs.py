"""Jobs and long-running processes of the mixed-version test (tests/upgrades).

Imported by the previous release's processes (its own virtualenv from
tests/support/releases.py, this tree on PYTHONPATH) and by HEAD's alike, so it
uses only the public API both releases share: ``jobwarden.Job``, ``Client``
(``enqueue``, ``enqueue_many``, ``conn=``, ``lease``, ``schedules.upsert``).

Every job records one ``ran`` row in ``public.audit`` (DSN from
``JOBWARDEN_TEST_AUDIT_DSN``) with the release of the process that ran it, so
"every job ended exactly once" is a count over rows, and which release ran how
many is a figure. Two processes run from here::

    python -m tests.support.upgradejobs client   # enqueues every kind of job until SIGTERM
    python -m tests.support.upgradejobs holder   # takes and releases leases until SIGTERM

Each prints one JSON summary line at exit and exits 1 if anything failed (a
failed enqueue, a lease release refused or raising), 0 otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

import psycopg

import jobwarden

#: The schedule the previous release's client defines (one slot a second).
SCHEDULE = "upgrade-every-second"
#: The standalone leases the holder takes and releases in turn.
HOLDER_LEASES = tuple(f"upgrade-holder-{n}" for n in range(3))


def release() -> str:
    """The release this process runs (0.1.0 has no jobwarden.version module)."""
    try:
        from jobwarden.version import VERSION
    except ImportError:
        return "0.1.0"
    return str(VERSION)


def audit(job: jobwarden.Job | None, event: str, detail: str | None = None) -> None:
    with psycopg.connect(os.environ["JOBWARDEN_TEST_AUDIT_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.audit (job_id, attempt, pid, event, detail) "
            "VALUES (%s, %s, %s, %s, %s)",
            (getattr(job, "job_id", None), getattr(job, "attempt", None), os.getpid(), event,
             detail if detail is not None else release()))


class Plain(jobwarden.Job):
    """Records one 'ran' row; takes a moment, so some are running at each SIGTERM."""

    def perform(self, data: Any) -> Any:
        time.sleep(0.05)
        audit(self, "ran")
        return data


class Contended(Plain):
    """Long enough that the next one finds its lease busy: it is deferred, and the
    release hands the lease over to it (the lease paths a worker takes under load)."""

    def perform(self, data: Any) -> Any:
        time.sleep(0.2)
        return super().perform(data)


class Exclusive(Contended):
    """One at a time across every worker (its lease: the class)."""

    exclusive = True


class Keyed(Contended):
    """One at a time per key (lease ``key:<key>``): two per key at a time are enqueued."""

    def concurrency_key_for(self, data: Any) -> str | None:
        return f"upgrade-key-{data['n'] % 2}"


class Scheduled(Plain):
    """The job of :data:`SCHEDULE`."""


# -- the processes -------------------------------------------------------------------

_stop = threading.Event()


def _on_sigterm(signum: int, frame: object) -> None:
    _stop.set()


def _finish(summary: dict[str, Any], failed: bool) -> int:
    print(json.dumps({"release": release(), **summary}), flush=True)
    return 1 if failed else 0


def run_client() -> int:
    """Enqueue plain, batch, transactional (committed and rolled back), exclusive and
    concurrency-key jobs in a loop; every enqueued id is recorded ('enqueued')."""
    client = jobwarden.Client()
    dsn = os.environ["JOBWARDEN_DSN"]
    if os.environ.get("UPGRADE_DEFINE_SCHEDULE") == "1":
        client.schedules.upsert(SCHEDULE, interval="1s", job_class=Scheduled, source="cli",
                                catch_up="none")
    enqueued, rolled_back, failures, n = 0, 0, 0, 0
    with psycopg.connect(dsn) as conn:
        while not _stop.is_set():
            n += 1
            try:
                ids = [client.enqueue(Plain, {"n": n}).id]
                ids += [r.id for r in client.enqueue_many(Plain, [{"n": n, "i": i}
                                                                  for i in range(3)])]
                with conn.transaction():
                    ids.append(client.enqueue(Plain, {"n": n, "tx": True}, conn=conn).id)
                with conn.transaction(force_rollback=True):
                    client.enqueue(Plain, {"n": n, "rolled_back": True}, conn=conn)
                    rolled_back += 1
                ids += [client.enqueue(Exclusive, {"n": n, "i": i}).id for i in range(2)]
                ids += [client.enqueue(Keyed, {"n": n, "i": i}).id for i in range(2)]
            except Exception:
                logging.exception("enqueue failed")
                failures += 1
                continue
            for job_id in ids:
                audit(None, "enqueued", str(job_id))
            enqueued += len(ids)
            _stop.wait(0.5)
    client.close()
    return _finish({"enqueued": enqueued, "rolled_back": rolled_back, "failures": failures},
                   failures > 0)


def run_holder() -> int:
    """Take and release standalone leases in turn; a release that is refused (False:
    someone took it over) or raises (the function it calls is gone) is a failure."""
    client = jobwarden.Client()
    owner = f"holder-{uuid.uuid4().hex[:8]}"
    taken, released, failures, n = 0, 0, 0, 0
    while not _stop.is_set():
        name = HOLDER_LEASES[n % len(HOLDER_LEASES)]
        n += 1
        try:
            lease = client.lease(name, ttl=60, wait=5, owner=owner).acquire()
        except Exception:
            logging.exception("lease %s not acquired", name)
            failures += 1
            continue
        taken += 1
        try:
            ok = lease.release()
        except Exception:
            logging.exception("lease %s not released", name)
            failures += 1
            continue
        if ok:
            released += 1
        else:
            logging.error("lease %s was taken over before its release", name)
            failures += 1
        _stop.wait(0.02)
    client.close()
    return _finish({"taken": taken, "released": released, "failures": failures}, failures > 0)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    print("ready", flush=True)
    return {"client": run_client, "holder": run_holder}[argv[0]]()


if __name__ == "__main__":
    # Run through the module's own name: classes defined in ``__main__`` would be
    # enqueued as ``__main__:Plain``, which no worker can import.
    from tests.support import upgradejobs

    sys.exit(upgradejobs.main(sys.argv[1:]))
