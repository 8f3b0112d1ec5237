"""Helpers for the pod-run tests: enqueue pod runs, read rows and counters."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import jobwarden
from jobwarden.db.database import Database
from jobwarden.observability import metrics
from tests.support import testjobs

POD = "ExclusiveJob/team-a/migrate-42"
CLAIMANT = "operator-a"


def enqueue_pod_run(client: jobwarden.Client, data: Any = None, *, job: Any = testjobs.Record,
                    pod_run: str = POD, **fields: Any) -> int:
    """One pod run; ``fields`` are JobSpec fields set after validation (lease_name, ...)."""
    spec = client.spec(job, data if data is not None else {"n": 1}, pod_run=pod_run,
                       **{k: fields.pop(k) for k in ("idempotent", "max_retries", "timeout",
                                                     "priority") if k in fields})
    return client.enqueue_specs([dataclasses.replace(spec, **fields)])[0].id


def row(db: Database, job_id: int, *columns: str) -> tuple[Any, ...]:
    with db.connection() as conn:
        found = conn.execute(
            f"SELECT {', '.join(columns)} FROM jobwarden.jobs WHERE id = %s",  # noqa: S608
            (job_id,)).fetchone()
    assert found is not None
    return tuple(found)


def counter(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def hold_lease(db: Database, name: str, *, ttl: float = 60.0) -> tuple[str, int]:
    """Another owner holds ``name``: (owner, token)."""
    owner = f"elsewhere-{uuid.uuid4().hex[:6]}"
    got = db.leases.try_acquire(name=name, owner=owner, ttl_seconds=ttl, host="other-host")
    assert got.acquired and got.token is not None
    return owner, got.token
