"""The operator process: kopf settings, the handler registry, HTTP, periodic loops.

Startup order, and why: the database is checked (and migrated) first, because
an operator that cannot reach it can do nothing useful and should crash-loop
visibly; then the HTTP server (so probes and scrapes answer while kopf
connects); then the periodic loops; then kopf, in the main thread so it owns
SIGTERM/SIGINT and shuts down gracefully. On the way out the loops release
their database leases, so another operator takes over at once instead of
after a lease lifetime.

kopf settings worth knowing (docs/operator.md):

* progress and the last-handled spec live in annotations under
  ``kopf.jobwarden.io/`` (not in ``status.kopf``: the CRDs' status schemas
  are closed, and the API server would prune it);
* the finalizer is ``jobwarden.io/finalizer``;
* watch streams end server-side after ``watch_server_timeout`` and are
  abandoned client-side after ``watch_client_timeout``, so a stream that
  silently died (a NAT or load balancer dropping it) is re-established;
* with ``JOBWARDEN_PEERING`` the replicas form a kopf peering with distinct
  priorities (derived from the pod name): only the highest handles resources;
* kopf posts only WARNING+ object logs as Events; the operator posts its own
  Events for transitions;
* no kopf timers and no delete handlers, hence no finalizer on any object
  (handlers.py says why): time-driven work is the resync loop's
  (resyncing.py), which pauses while kopf peering pauses this replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from typing import Any, cast

import kopf

from jobwarden.api.client import Client
from jobwarden.controller import periodic, resyncing, specs
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.exclusivejobs import reconciler as exclusivejobs
from jobwarden.controller.jobschedules import reconciler as jobschedules
from jobwarden.controller.kube.caching import ObjectCache
from jobwarden.controller.kube.client import KubeClient
from jobwarden.controller.kube.pods import KubePods
from jobwarden.controller.podruns import reconciler as podruns
from jobwarden.controller.runtime import KopfState, Runtime
from jobwarden.controller.workerpools import reconciler as workerpools
from jobwarden.db.database import Database
from jobwarden.observability import metrics
from jobwarden.observability.health import HealthServer

logger = logging.getLogger("jobwarden.controller")

FINALIZER = "jobwarden.io/finalizer"
ANNOTATIONS_PREFIX = "kopf.jobwarden.io"
#: Events posted at once (kopf's posting workers), see kopf_settings.
EVENTS_IN_FLIGHT = 8
#: /readyz fails when the database was last seen unreachable and not since.
READY_DB_GRACE_SECONDS = 30.0

#: One module per custom resource; each has ``register(registry, runtime)``.
RESOURCE_MODULES = (jobschedules, exclusivejobs, workerpools, podruns)


def kopf_settings(config: OperatorConfig) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATIONS_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATIONS_PREFIX, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    # At most this many Events in flight (kopf's default is no bound: at a start with
    # 10,000 new JobSchedules, one "Created" each, the API server answered with 504s);
    # a per-object poster exits soon after its last Event, so the bound is not held
    # by idle posters.
    settings.posting.worker_limit = EVENTS_IN_FLIGHT
    settings.posting.idle_timeout = 0.1
    settings.posting.reporting_component = "jobwarden-operator"
    settings.posting.reporting_instance = config.pod_name
    # kopf sends this as the watch's timeoutSeconds, which kube-apiserver parses as an
    # integer: "300.0" is a 400 on every watch and the operator never starts.
    settings.watching.server_timeout = max(1, round(config.watch_server_timeout))
    settings.watching.client_timeout = config.watch_client_timeout
    settings.watching.connect_timeout = config.watch_connect_timeout
    settings.networking.connect_timeout = config.watch_connect_timeout
    settings.networking.request_timeout = 60.0
    settings.peering.mandatory = bool(config.peering)
    settings.peering.priority = config.priority
    # Sync handlers run in kopf's thread pool; each holds at most one connection.
    settings.execution.max_workers = 8
    return settings


def build_registry(runtime: Runtime, *,
                   login: Callable[..., kopf.ConnectionInfo | None] | None = None,
                   ) -> kopf.OperatorRegistry:
    # kopf's own registry comes without logins: the Kubernetes client's login reads
    # the in-cluster service account or KUBECONFIG, as kubectl would.
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry, id="login")(login or kopf.login_via_client)
    for module in RESOURCE_MODULES:
        module.register(registry, runtime)
    return registry


# -- secrets never reach a log line ---------------------------------------------------------


def secrets_of(dsn: str) -> list[str]:
    """The DSN and its password, as they could appear in a message."""
    found = [dsn]
    try:
        parsed = urllib.parse.urlsplit(dsn)
        if parsed.password:
            found.append(parsed.password)
            found.append(urllib.parse.unquote(parsed.password))
    except ValueError:
        pass
    for match in re.finditer(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn):
        found.append(match.group(1).strip("'"))
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


class Redact(logging.Filter):
    """Replaces the DSN (and its password) in every record, whoever logged it."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        message = record.getMessage()
        redacted = message
        for secret in self._secrets:
            redacted = redacted.replace(secret, "***")
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def install_redaction(dsn: str) -> Redact:
    redact = Redact(secrets_of(dsn))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redact)
    # kopf posts object logs as Events from its own logger, before any handler.
    logging.getLogger("kopf.objects").addFilter(redact)
    return redact


class PeeringPause(logging.Filter):
    """Follows kopf's peering log to pause the resync loop when kopf pauses.

    kopf keeps the paused state to itself; it logs each change ("Pausing
    operations in favour of ...", "Pausing all operators, including self",
    "Resuming operations after the pause"). The record passes unchanged.
    """

    LOGGER = "kopf._core.engines.peering"

    def __init__(self, state: KopfState) -> None:
        super().__init__()
        self.state = state

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(("Pausing operations", "Pausing all operators")):
            self.state.paused = True
        elif message.startswith("Resuming operations"):
            self.state.paused = False
        return True


def build_runtime(db: Database, config: OperatorConfig, *,
                  login: Callable[..., kopf.ConnectionInfo | None] | None = None) -> Runtime:
    """The one place an operator's collaborators are made and handed to its Runtime."""
    metrics.prime_operator()
    kube = KubeClient(login)
    pods = KubePods(kube)
    return Runtime(
        db=db, config=config, client=Client(database=db), kube=kube, pods=pods,
        pod_runs=podruns.PodRuns(db, cluster=config.cluster, pods=pods,
                                    cache=ObjectCache()),
        owner=f"operator:{config.pod_name}:{uuid.uuid4().hex[:8]}",
        source=specs.source_of(config.cluster),
        kopf=KopfState(paused=bool(config.peering)))


# -- the process ---------------------------------------------------------------------------


class Operator:
    """One operator instance; :meth:`run` blocks until kopf stops."""

    def __init__(self, db: Database, config: OperatorConfig, *,
                 login: Callable[..., kopf.ConnectionInfo | None] | None = None) -> None:
        self.config = config
        self.runtime = build_runtime(db, config, login=login)
        self.registry = build_registry(self.runtime, login=login)
        self.loops, self.gauges = periodic.loops(self.runtime)
        self.periodic = periodic.Periodic(self.runtime, self.loops)
        self.resync = resyncing.Resync(self.runtime)
        self._peering = PeeringPause(self.runtime.kopf)
        self.http: HealthServer | None = None
        # No kopf stop flag: after a stop by signal kopf leaves the flag's waiter task
        # pending and waits its hung-task timeout (5 s) for it. stop() cancels kopf's
        # task instead, which kopf handles as a graceful stop too.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.stopping = False
        self._stopped_by_kopf = False

    # probes
    def healthy(self) -> tuple[bool, str]:
        health = self.runtime.health
        if health.crashed:
            return False, f"crashed: {health.crashed}"
        if health.kopf_stopped.is_set() and self._stopped_by_kopf:
            return False, "kopf stopped"
        alive, why = self.resync.alive()
        if not alive:
            return alive, why
        return self.periodic.alive()

    def ready(self) -> tuple[bool, str]:
        health = self.runtime.health
        if not health.kopf_ready.is_set():
            return False, "kopf is starting"
        if not health.db_ok and time.monotonic() - health.db_checked_at < READY_DB_GRACE_SECONDS:
            return False, "database unavailable"
        return True, "ok"

    def start_http(self) -> int | None:
        if self.config.http_port is None:
            return None
        self.http = HealthServer(host=self.config.http_host, port=self.config.http_port,
                                 ready=self.ready, healthy=self.healthy)
        self.http.start()
        logger.info("serving /metrics, /healthz, /readyz on port %d", self.http.port)
        return self.http.port

    async def _kopf(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if self.stopping:
            return
        try:
            await self._kopf_operator(self.config)
        finally:
            self._stopped_by_kopf = not self.stopping

    async def _kopf_operator(self, config: OperatorConfig) -> None:
        await kopf.operator(
            registry=self.registry,
            settings=kopf_settings(config),
            standalone=not config.peering,
            peering_name=config.peering or None,
            priority=config.priority,
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            ready_flag=self.runtime.health.kopf_ready,
            # Our peer id is the pod name (what kopf derives from $POD_ID). Left to kopf, it
            # asks getpass.getuser(), which raises for a runAsUser without a passwd entry
            # (found on the real cluster tier: the operator crash-looped as uid 10001).
            identity=cast(Any, config.pod_name),
        )

    def run(self) -> int:
        health = self.runtime.health
        health.database(True)
        self.start_http()
        self.periodic.start()
        if self.config.peering:
            logging.getLogger(PeeringPause.LOGGER).addFilter(self._peering)
        self.resync.start()
        logger.info("operator %s starting (cluster %r, %s, peering %s)", self.config.pod_name,
                    self.config.cluster,
                    f"namespaces {', '.join(self.config.namespaces)}"
                    if self.config.namespaces else "cluster-wide",
                    f"{self.config.peering!r} priority {self.config.priority}"
                    if self.config.peering else "off")
        health.kopf_started.set()
        try:
            asyncio.run(self._kopf())
        except asyncio.CancelledError:
            pass  # stop()
        except Exception as exc:
            health.crashed = f"{type(exc).__name__}: {exc}"
            logger.exception("kopf stopped with an error")
            return 1
        finally:
            health.kopf_stopped.set()
            self.resync.stop()
            logging.getLogger(PeeringPause.LOGGER).removeFilter(self._peering)
            self.periodic.stop()
            self.gauges.clear()
            if self.http is not None:
                self.http.close()
        logger.info("operator stopped")
        return 0

    def stop(self) -> None:
        """Stop from another thread (kopf stops by itself on SIGTERM/SIGINT)."""
        self.stopping = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)


def run_operator(db: Database, config: OperatorConfig, **options: Any) -> int:
    return Operator(db, config, **options).run()
