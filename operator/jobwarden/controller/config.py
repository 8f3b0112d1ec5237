"""The operator's settings: one dataclass, read from the environment the chart sets.

The chart configures ``jobwarden operator`` only through environment variables
(docs/kubernetes.md, "The operator's contract with the chart"); flags of the
command override them for local runs. Everything else has a documented default
here and in docs/operator.md; every variable is read with the parsers of
:mod:`jobwarden.settings`, as the worker's are. The DSN is not a field: it is read once, passed
to the database layer, and never stored where it could be printed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
from collections.abc import Mapping

from jobwarden import errors, settings


def _float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.05) -> float:
    return settings.env_number(name, default, minimum=minimum, env=env)


def _grace(env: Mapping[str, str]) -> int:
    """``JOBWARDEN_OWNER_GRACE_SECONDS``: whole seconds, 5 to 86400 (the table's CHECK)."""
    value = int(settings.env_number("JOBWARDEN_OWNER_GRACE_SECONDS", 300, integer=True,
                                    minimum=5, env=env))
    if value > 86_400:
        raise errors.ConfigurationError(
            f"JOBWARDEN_OWNER_GRACE_SECONDS must be at most 86400, not {value}")
    return value


def peering_priority(pod_name: str) -> int:
    """A kopf priority derived from the pod name: stable per pod, distinct between pods.

    kopf lets the highest priority of a peering handle resources; two peers with
    the same priority both keep running (and warn), so replicas must differ. A
    hash of the pod name spread over a million values makes a tie between two
    replicas a one-in-a-million event without any coordination.
    """
    digest = hashlib.sha256(pod_name.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 1_000_000 + 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    #: PostgreSQL schema (``JOBWARDEN_SCHEMA``).
    schema: str = "jobwarden"
    #: Namespaces to watch (``JOBWARDEN_NAMESPACES``); empty = cluster-wide.
    namespaces: tuple[str, ...] = ()
    #: Port of /metrics, /healthz, /readyz (``JOBWARDEN_HTTP_PORT``); None = no server.
    http_port: int | None = 8080
    http_host: str = "0.0.0.0"
    #: kopf peering name (``JOBWARDEN_PEERING``); empty = standalone.
    peering: str = ""
    #: kopf priority in the peering (``JOBWARDEN_PEERING_PRIORITY``, else from the pod name).
    priority: int = 0
    #: This replica (``JOBWARDEN_POD_NAME``): lease holder, peering identity, logs.
    pod_name: str = dataclasses.field(default_factory=socket.gethostname)
    pod_namespace: str = ""
    #: This cluster's id (``JOBWARDEN_CLUSTER``): the source of the schedule rows it writes.
    cluster: str = "default"
    #: How often each resource's status is refreshed from the database.
    status_interval: float = 5.0
    #: How often due schedule slots are enqueued (``JOBWARDEN_SCHEDULE_CHECK_SECONDS``).
    schedule_interval: float = 5.0
    #: How often stale claims are reaped (``JOBWARDEN_REAP_INTERVAL``).
    reap_interval: float = 10.0
    #: How often the database-wide gauges are refreshed (``JOBWARDEN_GAUGE_INTERVAL``).
    gauge_interval: float = 15.0
    #: Lifetime of a periodic loop's database lease; 0 = three of its intervals (>= 10 s).
    loop_lease_seconds: float = 0.0
    #: Watch requests: the server ends a stream after this long (kopf reconnects)...
    watch_server_timeout: float = 300.0
    #: ...and the client gives up on a stream that long after that (a silently dead stream).
    watch_client_timeout: float = 330.0
    watch_connect_timeout: float = 10.0
    #: The schedule rows this operator wrote keep firing this long after its last
    #: confirmation (``JOBWARDEN_OWNER_GRACE_SECONDS``); then every runner suspends them
    #: until an operator of this cluster returns (docs/schedules.md, "Rows whose owner
    #: is gone"). It bounds how long a JobSchedule deleted while no operator runs fires.
    owner_grace_seconds: int = 300
    #: /healthz fails while a periodic loop or the resync loop has been in one pass
    #: longer than this (``JOBWARDEN_STALL_SECONDS``; see ``looping.Progress``).
    stall_seconds: float = 120.0

    @property
    def owner_renew_seconds(self) -> float:
        """How often the confirmation is renewed: a fifth of the grace, at most 30 s."""
        return min(self.owner_grace_seconds / 5, 30.0)

    def loop_lease_ttl(self, interval: float) -> float:
        if self.loop_lease_seconds > 0:
            return self.loop_lease_seconds
        return max(3 * interval, 10.0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        # Set but blank: no HTTP server (unset: the default port).
        port = settings.env_int("JOBWARDEN_HTTP_PORT",
                                None if "JOBWARDEN_HTTP_PORT" in env else 8080,
                                env=env, what="a port number")
        pod = settings.env_text("JOBWARDEN_POD_NAME", "", env=env) or socket.gethostname()
        priority = settings.env_int("JOBWARDEN_PEERING_PRIORITY", None, env=env,
                                    what="an integer")
        server_timeout = _float(env, "JOBWARDEN_WATCH_SERVER_TIMEOUT", 300.0, minimum=1.0)
        return cls(
            schema=settings.env_text("JOBWARDEN_SCHEMA", "jobwarden", env=env),
            namespaces=settings.env_csv("JOBWARDEN_NAMESPACES", env=env),
            http_port=port,
            peering=settings.env_text("JOBWARDEN_PEERING", "", env=env),
            priority=peering_priority(pod) if priority is None else priority,
            pod_name=pod,
            pod_namespace=settings.env_text("JOBWARDEN_POD_NAMESPACE", "", env=env),
            cluster=settings.env_text("JOBWARDEN_CLUSTER", "default", env=env),
            status_interval=_float(env, "JOBWARDEN_STATUS_INTERVAL", 5.0),
            schedule_interval=_float(env, "JOBWARDEN_SCHEDULE_CHECK_SECONDS", 5.0),
            reap_interval=_float(env, "JOBWARDEN_REAP_INTERVAL", 10.0),
            gauge_interval=_float(env, "JOBWARDEN_GAUGE_INTERVAL", 15.0),
            loop_lease_seconds=_float(env, "JOBWARDEN_LOOP_LEASE_SECONDS", 0.0, minimum=0.0),
            watch_server_timeout=server_timeout,
            watch_client_timeout=_float(env, "JOBWARDEN_WATCH_CLIENT_TIMEOUT",
                                        server_timeout + 30.0, minimum=1.0),
            watch_connect_timeout=_float(env, "JOBWARDEN_WATCH_CONNECT_TIMEOUT", 10.0,
                                         minimum=1.0),
            owner_grace_seconds=_grace(env),
            stall_seconds=settings.env_duration("JOBWARDEN_STALL_SECONDS", 120.0, env=env),
        )
