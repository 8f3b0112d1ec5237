"""Pod runs: what the operator hands a pod, and what it learns back, as plain data.

A job whose ``pod_run`` is set runs in a pod of its own (docs/podruns.md). The
value names the resource whose pod template runs it, ``<Kind>/<namespace>/<name>``
(``JobSchedule/team-a/nightly-export``). The operator claims such rows
(:class:`PodRunClaim`), creates one pod per claim and maps what happened to a pod
that never recorded an outcome to a :data:`PodFailureCause`.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import uuid
from typing import Literal, get_args

from jobwarden.structs.jobs import ClaimedJob
from jobwarden.structs.states import JobStatus

#: Why a pod run ended without the job recording its own outcome. ``image_pull``,
#: ``unschedulable`` and ``start_deadline``: the pod never started within the start
#: deadline. ``oom_killed``, ``evicted``, ``node_lost``, ``killed``: it started and
#: died. ``deleted``: someone deleted the pod. ``replaced``: a Replace schedule
#: stopped it. ``error``: the operator could not create the pod at all.
PodFailureCause = Literal["image_pull", "unschedulable", "start_deadline", "oom_killed",
                          "evicted", "node_lost", "killed", "deleted", "replaced", "error"]
POD_FAILURE_CAUSES: tuple[str, ...] = get_args(PodFailureCause)

#: The resources that may carry a pod template.
POD_RUN_KINDS = ("JobSchedule", "ExclusiveJob")
#: A Kubernetes namespace (DNS label) and object name (DNS subdomain).
_POD_RUN = re.compile(
    r"^(?P<kind>[A-Za-z][A-Za-z0-9]*)/(?P<namespace>[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)"
    r"/(?P<name>[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$")
#: The jobs_pod_run_length / schedules_pod_run_length constraints.
MAX_POD_RUN_LENGTH = 400


def pod_run_ref(kind: str, namespace: str, name: str) -> str:
    """The ``pod_run`` value of a resource: ``<Kind>/<namespace>/<name>``."""
    return f"{kind}/{namespace}/{name}"


def pod_run_problem(value: object) -> str | None:
    """Why ``value`` is not a pod_run reference, or None when it is one."""
    if not isinstance(value, str):
        return f"must be a string '<Kind>/<namespace>/<name>', got {type(value).__name__}"
    if len(value) > MAX_POD_RUN_LENGTH:
        return f"is {len(value)} characters; at most {MAX_POD_RUN_LENGTH} are allowed"
    match = _POD_RUN.match(value)
    if match is None:
        return "must be '<Kind>/<namespace>/<name>' (a namespace and a Kubernetes object name)"
    if match.group("kind") not in POD_RUN_KINDS:
        return f"names kind {match.group('kind')!r}; one of {', '.join(POD_RUN_KINDS)} is needed"
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRunClaim:
    """One claimed pod run: everything the operator needs to create its pod.

    ``claim_token`` and ``lease_token`` go into the pod's environment
    (``JOBWARDEN_CLAIM_TOKEN``, ``JOBWARDEN_LEASE_TOKEN``); ``slot`` is the
    schedule slot of a schedule run (None for run-now and ExclusiveJob runs), for
    the pod's name.
    """

    job_id: int
    claim_token: str
    attempt: int
    pod_run: str
    schedule_name: str | None
    slot: datetime.datetime | None
    job_class: str
    idempotent: bool
    timeout_seconds: float
    #: Set when the row names a lease: taken at claim, owned by the claim token.
    lease_name: str | None
    #: The fencing token of that lease (None without a lease).
    lease_token: int | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodClaimBatch:
    """What one ``claim_pod_runs`` call did.

    ``claims`` get a pod each. Rows whose lease was busy got no pod: ``deferred``
    went back to pending with their attempt given back (on_busy ``defer``),
    ``skipped`` were dropped (``skip``), ``failed_busy`` failed (``fail``).
    """

    claims: list[PodRunClaim]
    deferred: int = 0
    skipped: int = 0
    failed_busy: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunningPodRun:
    """A processing pod run, as the operator's Replace, status and pod GC read it."""

    job_id: int
    pod_run: str
    claim_token: str
    attempt: int
    schedule_name: str | None
    slot: datetime.datetime | None
    cancel_requested: bool
    claimed_at: datetime.datetime | None
    #: The last heartbeat of run-job in the pod; None until run-job started (so
    #: None = the pod has not started the job: its code never ran under this claim).
    heartbeat_at: datetime.datetime | None
    #: When the reaper may reclaim it (claim + start deadline until run-job starts).
    claim_expires_at: datetime.datetime | None
    #: Who holds the claim: the claimant (``pod-runs:<cluster>``) until run-job
    #: starts, then the pod's name. A restarted operator re-creates the pod only of
    #: a claim its own cluster holds and no pod started.
    claimed_by: str | None = None
    #: The fencing token of the lease the claim took (None: no lease): handed to a
    #: re-created pod exactly as to the first.
    lease_token: int | None = None

    @property
    def started(self) -> bool:
        return self.heartbeat_at is not None


def slot_of(schedule_name: str | None, unique_key: str | None) -> datetime.datetime | None:
    """The schedule slot a job runs for, read from its unique key ``<name>:<slot>``.

    None for jobs that are not a slot of a schedule (run-now, backfill keys are
    slots too; an ExclusiveJob's run has no slot).
    """
    if schedule_name is None or unique_key is None \
            or not unique_key.startswith(schedule_name + ":"):
        return None
    text = unique_key[len(schedule_name) + 1:]
    try:
        slot = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return slot.replace(tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRunRow:
    """A pod run's row as its claim and its start return it (db/podruns.py).

    ``claim`` is what a worker would get for the same row, so ``jobwarden
    run-job`` runs it with the worker's own machinery.
    """

    claim: ClaimedJob
    pod_run: str
    unique_key: str | None
    #: The fencing token of the lease the claim took (None: no lease, or not yet).
    lease_token: int | None
    cancel_requested: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRunFailed:
    """What ``pod_run_fail`` wrote: the status after, and the leases it freed."""

    job_id: int
    status: JobStatus
    queue: str
    job_class: str
    leases_freed: int


def claim_token_text(token: uuid.UUID) -> str:
    """A claim token as it travels in a pod's environment (canonical UUID text)."""
    return str(token)
