"""``WorkerPool`` spec -> the worker pod template and its version: pure.

Why the operator renders the pod itself instead of creating a Deployment: it
must drain a host through the host registry *before* the pod goes, and a
Deployment deletes first. So the pod template is rendered here, once per spec,
and everything that makes two pods different versions of the worker goes into
one hash (:attr:`PoolSpec.template_hash`): the rendered template with every
operator-added field, plus ``codeVersion``. ``replicas`` and ``rollout`` are not
part of it (scaling is not a new version).

Every pod of a template gets the same manifest except its name, so nothing
pod-specific is rendered: the host name comes from the downward API
(``metadata.name``), which is also why a restarted operator can tell which
template a pod runs from the pod alone (its ``jobwarden.io/template-hash``
label).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import secrets
import string
from collections.abc import Mapping
from typing import Any

from jobwarden.controller.specs import SpecError

API_VERSION = "jobwarden.io/v1alpha1"
KIND = "WorkerPool"

POOL_LABEL = "jobwarden.io/pool"
HASH_LABEL = "jobwarden.io/template-hash"
CODE_VERSION_ANNOTATION = "jobwarden.io/code-version"
#: When the operator decided to drain this pod's host (epoch seconds, the operator's clock).
DRAIN_STARTED_ANNOTATION = "jobwarden.io/drain-started-at"
DRAIN_REASON_ANNOTATION = "jobwarden.io/drain-reason"
#: Worker pods are bare pods of a custom controller with an emptyDir: without this the
#: cluster-autoscaler never removes a node that runs one. Evicting a worker is safe: it
#: drains itself on SIGTERM within its grace period and the pool replaces it (the
#: pool's PodDisruptionBudget paces evictions). A template can set "false".
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"

#: Labels every worker pod carries (docs/kubernetes.md): the chart's PodMonitor,
#: workers Service and PodDisruptionBudget select on them, so a template cannot change them.
COMMON_LABELS = {
    "app.kubernetes.io/part-of": "jobwarden",
    "app.kubernetes.io/component": "worker",
}
#: Labels a template may set itself (its value wins); the operator's is only a default.
DEFAULT_LABELS = {"app.kubernetes.io/name": "jobwarden"}
INSTANCE_LABEL = "app.kubernetes.io/instance"
WORKER_CONTAINER = "worker"
DSN_VOLUME = "jobwarden-dsn"
DSN_MOUNT = "/var/run/secrets/jobwarden/dsn"
TMP_VOLUME = "tmp"
#: Seconds between the end of the worker's shutdown grace and SIGKILL: time to
#: record outcomes, deregister and exit.
EXIT_MARGIN_SECONDS = 10
#: Environment the operator owns: a pool's ``env`` cannot override these (the host
#: name, the pool and the DSN file are what the drain-first rollout relies on).
OWNED_ENV = frozenset({"JOBWARDEN_HOST", "POD_NAME", "POD_NAMESPACE", "JOBWARDEN_POOL",
                       "JOBWARDEN_DSN_FILE", "JOBWARDEN_CODE_VERSION", "JOBWARDEN_DSN"})

#: Every path under ``spec`` this module reads (tests check the CRD declares them).
POOL_FIELDS = ("image", "imagePullPolicy", "command", "template", "replicas", "queues",
               "concurrency", "hostCap", "isolation", "apps", "dsnSecretRef",
               "dsnSecretRef.name", "dsnSecretRef.key", "drainTimeoutSeconds", "rollout",
               "rollout.maxSurge", "rollout.maxUnavailable", "codeVersion", "env",
               "resources", "httpPort", "podDisruptionBudget",
               "podDisruptionBudget.maxUnavailable", "podDisruptionBudget.minAvailable",
               "progressDeadlineSeconds")
#: Like a Deployment's: seconds without progress before Progressing=False (pool_health.py).
DEFAULT_PROGRESS_DEADLINE = 600


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolSpec:
    name: str
    replicas: int
    queues: tuple[str, ...]
    drain_timeout: int
    max_surge: int
    max_unavailable: int
    http_port: int
    code_version: str
    #: Hash of everything that makes a pod of this spec a different worker version.
    template_hash: str
    #: The pod manifest without ``metadata.name`` / ownerReferences (see :func:`pod_manifest`).
    template: dict[str, Any]
    #: The Secret (and key) holding the DSN, checked before pods are created.
    dsn_secret: str = ""
    dsn_key: str = "dsn"
    #: ``{"maxUnavailable": ...}`` or ``{"minAvailable": ...}`` of the pool's
    #: PodDisruptionBudget; None: the pool has none.
    disruption: dict[str, int | str] | None = None
    #: ``spec.progressDeadlineSeconds`` (not part of the version, like ``replicas``).
    progress_deadline: int = DEFAULT_PROGRESS_DEADLINE

    @property
    def selector(self) -> str:
        return f"{POOL_LABEL}={label_value(self.name)}"


def _int(spec: Mapping[str, Any], field: str, default: int, *, minimum: int = 0) -> int:
    value = spec.get(field, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, f"must be an integer >= {minimum}, not {value!r}")
    return value


def _strings(spec: Mapping[str, Any], field: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = spec.get(field)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(field, "must be a list of non-empty strings")
    return tuple(value)


def image_tag(image: str) -> str | None:
    """``repo/app:1.4`` -> ``1.4``; a digest -> ``sha256:<12 hex>``; no tag -> None."""
    if "@" in image:
        digest = image.rsplit("@", 1)[1]
        return digest[:19]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        tag = last.rsplit(":", 1)[1]
        return tag if tag and tag != "latest" else None
    return None


def template_hash(template: Mapping[str, Any], code_version: str) -> str:
    canonical = json.dumps({"template": template, "codeVersion": code_version},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:10]


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Fields:
    """The spec's own fields, checked (everything but the pod template)."""

    replicas: int
    concurrency: int
    host_cap: int
    drain: int
    http_port: int
    progress_deadline: int
    max_surge: int
    max_unavailable: int
    queues: tuple[str, ...]
    apps: tuple[str, ...]
    isolation: str
    secret: str
    secret_key: str
    disruption: dict[str, int | str] | None


def parse_pool(name: str, spec: Mapping[str, Any] | None) -> PoolSpec:
    """Parse and render; raises :class:`SpecError` naming the field at fault.

    The steps, in the order their errors are reported: the fields
    (:func:`_fields`), the template and its worker container (:func:`_worker`),
    the worker's environment (:func:`_worker_env`), then what the operator adds
    to every pod (the DSN Secret's volume, the HTTP port and probes, the security
    restrictions, the version labels).
    """
    spec = dict(spec or {})
    fields = _fields(spec)
    raw_template = spec.get("template")
    if raw_template is not None and not isinstance(raw_template, Mapping):
        raise SpecError("template", "must be a pod template object")
    template: dict[str, Any] = copy.deepcopy(dict(raw_template or {}))
    meta = template.setdefault("metadata", {})
    pod = template.setdefault("spec", {})
    worker = _worker(pod, spec)
    worker["env"] = _worker_env(name, spec, worker, fields)
    _mount_dsn(worker, pod, fields)
    _serve_http(worker, fields.http_port)
    restrict(pod)
    pod["terminationGracePeriodSeconds"] = fields.drain + EXIT_MARGIN_SECONDS
    pod.setdefault("restartPolicy", "Always")

    explicit_version = str(spec.get("codeVersion") or "")
    digest = template_hash(template, explicit_version)
    code_version = explicit_version or image_tag(str(worker["image"])) or digest
    worker["env"].insert(0, _env("JOBWARDEN_CODE_VERSION", code_version))
    # After the hash, so adding it rolls no pool: it changes what the kubelet reports
    # about an exit (the tail of the output as the terminated state's message, which
    # ReplicaFailure and its Event show), not what the worker runs.
    worker.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    meta["labels"] = pod_labels(meta.get("labels"), owner=name,
                                owned={**COMMON_LABELS, POOL_LABEL: label_value(name),
                                       HASH_LABEL: digest})
    meta["annotations"] = {SAFE_TO_EVICT_ANNOTATION: "true",
                           **dict(meta.get("annotations") or {}),
                           CODE_VERSION_ANNOTATION: code_version}
    return PoolSpec(name=name, replicas=fields.replicas, queues=fields.queues,
                    drain_timeout=fields.drain, max_surge=fields.max_surge,
                    max_unavailable=fields.max_unavailable, http_port=fields.http_port,
                    code_version=code_version, template_hash=digest, template=template,
                    dsn_secret=fields.secret, dsn_key=fields.secret_key,
                    disruption=fields.disruption, progress_deadline=fields.progress_deadline)


def _fields(spec: Mapping[str, Any]) -> _Fields:
    replicas = _int(spec, "replicas", 1)
    concurrency = _int(spec, "concurrency", 10, minimum=1)
    host_cap = _int(spec, "hostCap", 0)
    drain = _int(spec, "drainTimeoutSeconds", 600)
    http_port = _int(spec, "httpPort", 8080, minimum=1)
    progress_deadline = _int(spec, "progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE,
                             minimum=1)
    rollout = spec.get("rollout") or {}
    if not isinstance(rollout, Mapping):
        raise SpecError("rollout", "must be an object")
    max_surge = _int(rollout, "maxSurge", 1)
    max_unavailable = _int(rollout, "maxUnavailable", 0)
    if max_surge == 0 and max_unavailable == 0:
        raise SpecError("rollout", "maxSurge and maxUnavailable cannot both be 0")
    queues = _strings(spec, "queues", ("default",))
    apps = _strings(spec, "apps", ())
    isolation = spec.get("isolation") or "thread"
    if isolation not in ("thread", "process"):
        raise SpecError("isolation", f"must be thread or process, not {isolation!r}")
    secret = spec.get("dsnSecretRef")
    if not isinstance(secret, Mapping) or not secret.get("name"):
        raise SpecError("dsnSecretRef.name", "the Secret holding the DSN is required")
    return _Fields(replicas=replicas, concurrency=concurrency, host_cap=host_cap, drain=drain,
                   http_port=http_port, progress_deadline=progress_deadline,
                   max_surge=max_surge, max_unavailable=max_unavailable, queues=queues,
                   apps=apps, isolation=str(isolation), secret=str(secret["name"]),
                   secret_key=str(secret.get("key") or "dsn"),
                   disruption=_disruption(spec.get("podDisruptionBudget")))


def _worker(pod: dict[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The template's worker container (named ``worker``, else the first, else a new
    one), with the spec's image, pull policy, command and resources."""
    containers = pod.setdefault("containers", [])
    if not isinstance(containers, list):
        raise SpecError("template", "spec.containers must be a list")
    worker = next((c for c in containers if isinstance(c, dict)
                   and c.get("name") == WORKER_CONTAINER), None)
    if worker is None:
        worker = containers[0] if containers and isinstance(containers[0], dict) else None
    if worker is None:
        worker = {"name": WORKER_CONTAINER}
        containers.insert(0, worker)
    if spec.get("image"):
        worker["image"] = str(spec["image"])
    if not worker.get("image"):
        raise SpecError("image", "set spec.image or the worker container's image in template")
    if spec.get("imagePullPolicy"):
        worker["imagePullPolicy"] = spec["imagePullPolicy"]
    if spec.get("command"):
        worker["command"] = list(spec["command"])
    elif not worker.get("command"):
        worker["command"] = ["jobwarden", "worker"]
    if spec.get("resources"):
        worker["resources"] = copy.deepcopy(spec["resources"])
    return worker


def _worker_env(name: str, spec: Mapping[str, Any], worker: Mapping[str, Any],
                fields: _Fields) -> list[dict[str, Any]]:
    """The operator's variables (unless the user's define them), then the user's."""
    user_env = [dict(e) for e in (spec.get("env") or []) if isinstance(e, Mapping)]
    user_env += [dict(e) for e in (worker.get("env") or []) if isinstance(e, Mapping)]
    for entry in user_env:
        if entry.get("name") in OWNED_ENV:
            raise SpecError("env", f"{entry.get('name')} is set by the operator")
    env = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("JOBWARDEN_HOST", "metadata.name"),
        _env("JOBWARDEN_POOL", name),
        _env("JOBWARDEN_DSN_FILE", f"{DSN_MOUNT}/{fields.secret_key}"),
        _env("JOBWARDEN_QUEUES", ",".join(fields.queues)),
        _env("JOBWARDEN_CONCURRENCY", str(fields.concurrency)),
        _env("JOBWARDEN_HOST_CAP", str(fields.host_cap)),
        _env("JOBWARDEN_ISOLATION", fields.isolation),
        _env("JOBWARDEN_HTTP_PORT", str(fields.http_port)),
        _env("JOBWARDEN_SHUTDOWN_GRACE", str(fields.drain)),
    ]
    if fields.apps:
        env.append(_env("JOBWARDEN_APPS", ",".join(fields.apps)))
    defined = {e["name"] for e in user_env}
    return [e for e in env if e["name"] not in defined] + user_env


def _mount_dsn(worker: dict[str, Any], pod: dict[str, Any], fields: _Fields) -> None:
    """The DSN Secret's key as a read-only file, and a writable /tmp unless one is mounted."""
    mounts = [m for m in worker.get("volumeMounts") or [] if m.get("name") != DSN_VOLUME]
    mounts.append({"name": DSN_VOLUME, "mountPath": DSN_MOUNT, "readOnly": True})
    volumes = [v for v in pod.get("volumes") or [] if v.get("name") != DSN_VOLUME]
    volumes.append({"name": DSN_VOLUME, "secret": {
        "secretName": fields.secret,
        "items": [{"key": fields.secret_key, "path": fields.secret_key}]}})
    if not any(m.get("mountPath") == "/tmp" for m in mounts):
        mounts.append({"name": TMP_VOLUME, "mountPath": "/tmp"})
        volumes.append({"name": TMP_VOLUME, "emptyDir": {}})
    worker["volumeMounts"] = mounts
    pod["volumes"] = volumes


def _serve_http(worker: dict[str, Any], http_port: int) -> None:
    """The ``http`` port first; /readyz and /healthz probes unless the template has its own."""
    ports = [p for p in worker.get("ports") or [] if p.get("name") != "http"]
    worker["ports"] = [{"name": "http", "containerPort": http_port, "protocol": "TCP"}, *ports]
    worker.setdefault("readinessProbe", {"httpGet": {"path": "/readyz", "port": "http"},
                                         "periodSeconds": 5, "failureThreshold": 2})
    worker.setdefault("livenessProbe", {"httpGet": {"path": "/healthz", "port": "http"},
                                        "initialDelaySeconds": 10, "periodSeconds": 10,
                                        "failureThreshold": 6})


def label_value(name: str) -> str:
    """A resource name as a label value (at most 63 characters, ends alphanumeric).

    Names of custom resources may be 253 characters long; a longer one is cut
    and keeps a hash of the whole, so two long names stay apart.
    """
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{name[:54].rstrip('-.')}-{digest}"


def pod_labels(user: Mapping[str, str] | None, *, owner: str,
               owned: Mapping[str, str]) -> dict[str, str]:
    """The labels of a pod the operator makes from a template.

    The template's own labels are kept, ``app.kubernetes.io/name`` and
    ``app.kubernetes.io/instance`` (the owner's name) included: the operator
    adds those only where the template has none. ``owned`` (what selectors and
    the operator itself rely on) always wins.
    """
    return {**DEFAULT_LABELS, INSTANCE_LABEL: label_value(owner), **dict(user or {}),
            **owned}


def _disruption(raw: Any) -> dict[str, int | str] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError("podDisruptionBudget", "must be an object")
    given = {k: raw[k] for k in ("maxUnavailable", "minAvailable") if raw.get(k) is not None}
    if len(given) != 1:
        raise SpecError("podDisruptionBudget",
                        "set exactly one of maxUnavailable or minAvailable")
    (key, value), = given.items()
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(f"podDisruptionBudget.{key}", "must be a number or a percentage")
    if isinstance(value, int) and value < 0:
        raise SpecError(f"podDisruptionBudget.{key}", "must not be negative")
    if isinstance(value, str) and not (value.endswith("%") and value[:-1].isdigit()):
        raise SpecError(f"podDisruptionBudget.{key}", f"{value!r} is not a percentage like 25%")
    return {key: value}


def pdb_manifest(pool: PoolSpec, *, namespace: str, owner_uid: str) -> dict[str, Any] | None:
    """The pool's PodDisruptionBudget (named after the pool, owned by it), or None."""
    if pool.disruption is None:
        return None
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": pool.name, "namespace": namespace,
                     "labels": {**DEFAULT_LABELS, **COMMON_LABELS,
                                INSTANCE_LABEL: label_value(pool.name),
                                POOL_LABEL: label_value(pool.name)},
                     "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND,
                                          "name": pool.name, "uid": owner_uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {**pool.disruption,
                 "selector": {"matchLabels": {POOL_LABEL: label_value(pool.name)}}},
    }


#: What every container the operator runs gets unless the template says otherwise:
#: the ``restricted`` Pod Security Standard (kubernetes.io/docs/concepts/security/
#: pod-security-standards), so worker pods are admitted in namespaces enforcing it.
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}
POD_SECURITY = {
    "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def restrict(pod: dict[str, Any]) -> None:
    """Fill the restricted-level security fields the template leaves unset (in place).

    Key by key, so a template that sets only ``runAsUser`` still gets the
    seccomp profile and the dropped capabilities; a value the template sets wins
    (the admission controller then judges it). Job code gets no ServiceAccount
    token unless the template asks for one: workers never call the Kubernetes API.
    """
    pod.setdefault("automountServiceAccountToken", False)
    pod_context = pod.setdefault("securityContext", {})
    if isinstance(pod_context, dict):
        for key, value in POD_SECURITY.items():
            pod_context.setdefault(key, copy.deepcopy(value))
    for field in ("initContainers", "containers"):
        for container in pod.get(field) or []:
            if not isinstance(container, dict):
                continue
            context = container.setdefault("securityContext", {})
            if isinstance(context, dict):
                for key, value in CONTAINER_SECURITY.items():
                    context.setdefault(key, copy.deepcopy(value))


_ALPHABET = string.ascii_lowercase + string.digits


def pod_name(pool: PoolSpec) -> str:
    """``<pool>-<hash[:5]>-<random>``: the host name; the hash part shows the version."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(5))
    return f"{pool.name[:50]}-{pool.template_hash[:5]}-{suffix}"


def pod_manifest(pool: PoolSpec, *, name: str, namespace: str, owner_uid: str) -> dict[str, Any]:
    template = copy.deepcopy(pool.template)
    meta = template["metadata"]
    meta.update(name=name, namespace=namespace, ownerReferences=[{
        "apiVersion": API_VERSION, "kind": KIND, "name": pool.name, "uid": owner_uid,
        "controller": True, "blockOwnerDeletion": True}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
