"""A reaped claim releases the lease it held (issue #12, defect 6).

The claim and its lease are taken exactly as a worker's exclusive-job guard
takes them (owner = claim token, the lease recorded on the job row); then the
claimant "dies": its heartbeats stop (its reap deadline is moved into the past)
and the reaper runs. The lease is free at once instead of after its window --
but only the lease this claim held: a lease taken over since stays with its new
holder, and the lease of a live claim is untouched.
"""

from __future__ import annotations

import psycopg

import jobwarden
from jobwarden.structs.jobs import ClaimedJob
from tests.support import testjobs


def _claim_with_lease(client: jobwarden.Client, name: str) -> tuple[ClaimedJob, int]:
    job_id = client.enqueue(testjobs.Record, idempotent=False).id
    (claim,) = [c for c in client.db.jobs.claim(host="doomed", limit=10, grace_seconds=60)
                if c.id == job_id]
    got = client.db.leases.try_acquire(name=name, owner=str(claim.claim_token), ttl_seconds=600,
                                       host="doomed", job_id=claim.id,
                                       claim_token=claim.claim_token)
    assert got.acquired and got.token is not None
    return claim, got.token


def _heartbeats_stop(dsn: str, job_id: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET claim_expires_at = now() - interval '1 second' "
                     "WHERE id = %s", (job_id,))


def test_reaping_a_claim_frees_its_lease_at_once(client: jobwarden.Client, dsn: str) -> None:
    claim, _token = _claim_with_lease(client, "key:report")
    live, live_token = _claim_with_lease(client, "key:other")
    _heartbeats_stop(dsn, claim.id)
    assert [j.id for j in client.db.jobs.reap()] == [claim.id]
    assert client.db.leases.owner_of("key:report") is None
    # The next holder gets it now, with a larger fencing token.
    again = client.lease("key:report", ttl=30).acquire()
    assert again.token > _token
    again.release()
    # A live claim's lease is untouched.
    assert client.db.leases.owner_of("key:other") == str(live.claim_token)
    assert client.db.leases.read("key:other")[0].token == live_token


def test_a_lease_taken_over_since_stays_with_its_new_holder(client: jobwarden.Client,
                                                             dsn: str) -> None:
    claim, token = _claim_with_lease(client, "key:moved")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the lease lapsed ...
        conn.execute("UPDATE jobwarden.leases SET expires_at = now() - interval '1 second' "
                     "WHERE name = 'key:moved'")
    successor = client.lease("key:moved", ttl=60).acquire()  # ... and was taken over
    assert successor.token > token
    _heartbeats_stop(dsn, claim.id)
    assert [j.id for j in client.db.jobs.reap()] == [claim.id]
    assert client.db.leases.owner_of("key:moved") == successor.owner
    assert successor.release() is True


def _deferred_on(client: jobwarden.Client, dsn: str, name: str, *, priority: int = 0) -> int:
    """A pending job deferred on ``name`` for 30 s, as a busy claim leaves it."""
    job_id = client.enqueue(testjobs.Record, priority=priority).id
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobwarden.jobs SET lease_name = %s, "
                     "run_at = now() + interval '30 seconds' WHERE id = %s", (name, job_id))
    return job_id


def _due_now(dsn: str, job_ids: list[int]) -> dict[int, bool]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id, run_at <= now() FROM jobwarden.jobs WHERE id = ANY(%s)",
                            (job_ids,)).fetchall()
    return {r[0]: r[1] for r in rows}


def test_reaping_a_claim_hands_its_lease_to_the_next_job_deferred_on_it(
        client: jobwarden.Client, dsn: str) -> None:
    claim, _token = _claim_with_lease(client, "key:report")
    first = _deferred_on(client, dsn, "key:report", priority=5)
    second = _deferred_on(client, dsn, "key:report")
    elsewhere = _deferred_on(client, dsn, "key:other")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobwarden_jobs")
        _heartbeats_stop(dsn, claim.id)
        assert [j.id for j in client.db.jobs.reap()] == [claim.id]
        # The workers of its queue hear of it, as after a holder's own release.
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == [testjobs.Record.queue]
    # One job at a time (the highest priority first); the others keep their delay.
    assert _due_now(dsn, [first, second, elsewhere]) == {first: True, second: False,
                                                        elsewhere: False}
