"""What every handler of one operator instance shares: the database, its settings, health.

One :class:`Runtime` per operator (not module globals), so two operators can
run in one process in tests, each against its own cluster, and so the handler
modules receive their dependencies instead of importing them.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
import uuid
from typing import TYPE_CHECKING

from jobwarden import metrics
from jobwarden.client import Client
from jobwarden.controller import specs
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.kinds import Kind
from jobwarden.controller.kubeclient import KubeClient
from jobwarden.db.database import Database

if TYPE_CHECKING:
    from jobwarden.controller.podrunning import PodRuns


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


class Runtime:
    def __init__(self, db: Database, config: OperatorConfig) -> None:
        self.db = db
        self.client = Client(database=db)
        self.config = config
        self.source = specs.source_of(config.cluster)
        #: This process's identity as a lease owner (unique per process, readable).
        self.owner = f"operator:{config.pod_name}:{uuid.uuid4().hex[:8]}"
        self.health = Health()
        metrics.prime_operator()
        #: The kinds this operator reconciles (handlers.register adds them).
        self.kinds: list[Kind] = []
        #: The operator's own Kubernetes calls (pods, status writes outside kopf).
        self.kube = KubeClient()
        #: Set once kopf has listed every indexed kind (its handlers run only then).
        self.indexed = threading.Event()
        #: A context of kopf's handler threads: kopf posts Events only from such a
        #: context, so the resync loop runs its passes in a copy of it.
        self.kopf_context: contextvars.Context | None = None
        #: True while kopf peering pauses this replica for a higher-priority one. With
        #: peering, kopf starts paused (mandatory peering is pre-activated) and logs only
        #: the resume: a replica that starts behind a higher-priority peer never logs
        #: "Pausing", so starting unpaused let the standby's resync loop act (found on
        #: the real cluster tier with two replicas).
        self.paused = bool(config.peering)
        #: Runs in pods of their own (the operator sets it; None where only the
        #: reconcilers are tested): the JobSchedule / ExclusiveJob passes call it.
        self.pod_runs: PodRuns | None = None

    @staticmethod
    def reconciled(kind: str, result: str) -> None:
        metrics.OPERATOR_RECONCILES.labels(kind, result).inc()

    @staticmethod
    def failed(kind: str) -> None:
        metrics.OPERATOR_ERRORS.labels(kind).inc()
        metrics.OPERATOR_RECONCILES.labels(kind, "error").inc()
