"""What every handler of one operator instance shares: the database, its settings, health.

One :class:`Runtime` per operator (not module globals), so two operators can
run in one process in tests, each against its own cluster, and so the handler
modules receive their dependencies instead of importing them. It is frozen and
built in one place (:func:`jobwarden.controller.app.build_runtime`) with every
collaborator it hands out: nothing is filled in after construction. What does
change while the operator runs is state, and it says so: :class:`Health` (the
probes' inputs), :class:`KopfState` (what kopf let the operator learn), the
``indexed`` flag and the kinds registration adds.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from typing import TYPE_CHECKING

from jobwarden.api.client import Client
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.kube.client import KubeClient
from jobwarden.controller.kube.kinds import Kind
from jobwarden.controller.kube.pods import KubePods
from jobwarden.db.database import Database
from jobwarden.observability import metrics

if TYPE_CHECKING:
    from jobwarden.controller.podruns.reconciler import PodRuns


@dataclasses.dataclass
class Health:
    """What /healthz and /readyz answer from (written by kopf's tasks and the loops)."""

    kopf_started: threading.Event = dataclasses.field(default_factory=threading.Event)
    kopf_ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    kopf_stopped: threading.Event = dataclasses.field(default_factory=threading.Event)
    db_ok: bool = False
    db_checked_at: float = 0.0
    crashed: str | None = None

    def database(self, ok: bool) -> None:
        self.db_ok = ok
        self.db_checked_at = time.monotonic()


@dataclasses.dataclass
class KopfState:
    """What kopf lets the operator learn while it runs (it keeps both to itself)."""

    #: A context of kopf's handler threads: kopf posts Events only from such a
    #: context, so the resync loop runs its passes in a copy of it (handlers.seen).
    context: contextvars.Context | None = None
    #: True while kopf peering pauses this replica for a higher-priority one (followed
    #: from kopf's peering log, app.PeeringPause). With peering, kopf starts paused
    #: (mandatory peering is pre-activated) and logs only the resume: a replica that
    #: starts behind a higher-priority peer never logs "Pausing", so starting unpaused
    #: let the standby's resync loop act (found on the real cluster tier with two
    #: replicas).
    paused: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    db: Database
    config: OperatorConfig
    client: Client
    #: The operator's own Kubernetes calls (status writes outside kopf) ...
    kube: KubeClient
    #: ... and its pod calls, through that client (worker pods, run pods, Secrets).
    pods: KubePods
    #: Runs in pods of their own: the JobSchedule / ExclusiveJob passes call it (None
    #: where only the reconcilers are tested).
    pod_runs: PodRuns | None
    #: This process's identity as a lease owner (unique per process, readable).
    owner: str
    #: The ``source`` of the schedule rows this operator writes (its cluster's).
    source: str
    health: Health = dataclasses.field(default_factory=Health)
    kopf: KopfState = dataclasses.field(default_factory=KopfState)
    #: Set once kopf has listed every indexed kind (its handlers run only then).
    indexed: threading.Event = dataclasses.field(default_factory=threading.Event)
    #: The kinds this operator reconciles (handlers.register adds them while the
    #: registry is built, before kopf starts).
    kinds: list[Kind] = dataclasses.field(default_factory=list)

    @property
    def paused(self) -> bool:
        return self.kopf.paused

    @property
    def kopf_context(self) -> contextvars.Context | None:
        return self.kopf.context

    @staticmethod
    def reconciled(kind: str, result: str) -> None:
        metrics.OPERATOR_RECONCILES.labels(kind, result).inc()

    @staticmethod
    def failed(kind: str) -> None:
        metrics.OPERATOR_ERRORS.labels(kind).inc()
        metrics.OPERATOR_RECONCILES.labels(kind, "error").inc()
