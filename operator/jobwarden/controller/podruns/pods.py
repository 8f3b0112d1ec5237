"""The pod of one claimed run (a ``JobSchedule`` slot or an ``ExclusiveJob``): pure.

Why the name is derived, not random: the operator claims the job row first and
creates the pod second. If it dies in between, or the create's reply is lost,
the next attempt to create the same run's pod must find the first one (HTTP 409)
instead of starting the job twice. So the name is a function of the resource,
the run (its slot, else its job id) and the attempt the claim counted -- the
same claim always maps to the same pod, a retry (a new claim, a new attempt) to
a new one -- and it stays a DNS label (at most 63 characters) however long the
resource's name is.

What the operator adds to the user's template, and why:

* ``restartPolicy: Never``: a restarted container would run the job again
  under the same claim; a retry is a new claim and a new pod, decided by the
  job's retry rules;
* the claim (``JOBWARDEN_JOB_ID``, ``JOBWARDEN_CLAIM_TOKEN`` and, when the claim
  took a lease, ``JOBWARDEN_LEASE_TOKEN``) and the DSN Secret mounted as a file
  exactly as a WorkerPool pod gets it (``JOBWARDEN_DSN_FILE``), so ``jobwarden
  run-job`` needs no flags; without a command the job container runs it;
* the restricted Pod Security Standard's fields the template leaves unset and
  no ServiceAccount token unless the template asks for one (the same defaults as
  worker pods, :func:`jobwarden.controller.workerpools.spec.restrict`);
* an ownerReference to the resource (``kubectl delete`` of the resource takes
  its pods along) and labels that find a run's pods by resource and by job.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from jobwarden.controller import specs
from jobwarden.controller.podruns import fates
from jobwarden.controller.workerpools import spec as pools_spec

API_VERSION = "jobwarden.io/v1alpha1"

#: The resource's uid (a label value cannot hold ``Kind/namespace/name``).
POD_RUN_LABEL = "jobwarden.io/pod-run"
JOB_ID_LABEL = "jobwarden.io/job-id"
ATTEMPT_LABEL = "jobwarden.io/attempt"
KIND_LABEL = "jobwarden.io/run-kind"
#: ``Kind/namespace/name``: the job rows' ``pod_run``.
POD_RUN_ANNOTATION = "jobwarden.io/pod-run"
#: When the operator's claim returned (epoch seconds): start latency is measured from it.
CLAIMED_AT_ANNOTATION = "jobwarden.io/claimed-at"
#: Why the operator deleted the pod (``replaced``, ``start_deadline`` ...), set before
#: the delete so the pod watch names the right cause.
STOP_REASON_ANNOTATION = fates.STOP_REASON_ANNOTATION

#: Labels every run pod carries; a template's ``app.kubernetes.io/name`` and
#: ``app.kubernetes.io/instance`` are kept (:func:`pools_spec.pod_labels`).
COMMON_LABELS = {
    "app.kubernetes.io/part-of": "jobwarden",
    "app.kubernetes.io/component": "job-run",
}
#: The owning resource's name (with ``jobwarden.io/run-kind``: ``kubectl get pods -l``).
OWNER_LABEL = "jobwarden.io/owner"
#: Environment the operator owns: a template cannot set these.
OWNED_ENV = specs.POD_RUN_OWNED_ENV
DEFAULT_COMMAND = ["jobwarden", "run-job"]
MAX_NAME = 63


@dataclasses.dataclass(frozen=True, kw_only=True)
class Owner:
    """The resource a run belongs to."""

    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def pod_run(self) -> str:
        return specs.pod_run_name(self.kind, self.namespace, self.name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """One claim, as far as its pod needs it."""

    job_id: int
    attempt: int
    claim_token: str
    slot: dt.datetime | None = None
    lease_token: int | None = None


def _dns_label(text: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return re.sub(r"-{2,}", "-", cleaned) or "run"


def run_key(run: Run) -> str:
    """The run's part of the name: its slot in UTC (``20261130t040000``), else ``j<id>``."""
    if run.slot is not None:
        return run.slot.astimezone(dt.UTC).strftime("%Y%m%dt%H%M%S")
    return f"j{run.job_id}"


def pod_name(owner: Owner, run: Run) -> str:
    """``<resource>-<slot or job id>-<attempt>``, at most 63 characters, stable per claim.

    A name too long is cut and keeps a hash of the whole resource identity, so two
    long names that share a prefix still get different pods.
    """
    suffix = f"-{run_key(run)}-{run.attempt}"
    base = _dns_label(owner.name)
    room = MAX_NAME - len(suffix)
    if len(base) > room:
        digest = hashlib.sha256(owner.pod_run.encode("utf-8")).hexdigest()[:6]
        base = f"{base[:room - 7].rstrip('-')}-{digest}"
    return f"{base}{suffix}"


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def job_container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The container that runs the job: the one named ``job``, else the first."""
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    named = next((c for c in containers if c.get("name") == specs.JOB_CONTAINER), None)
    return named or (containers[0] if containers else None)


def pod_manifest(spec: specs.PodRunSpec, *, owner: Owner, run: Run,
                 claimed_at: float) -> dict[str, Any]:
    """The Pod to create for ``run`` (raises :class:`specs.SpecError` on an owned env name)."""
    template = copy.deepcopy(spec.template)
    pod: dict[str, Any] = dict(template.get("spec") or {})
    container = job_container(pod)
    if container is None:  # parse_* refuses such a template; a defensive second look
        raise specs.SpecError("podTemplate.spec.containers", "has no container")
    container.setdefault("name", specs.JOB_CONTAINER)
    if not container.get("command") and not container.get("args"):
        container["command"] = list(DEFAULT_COMMAND)
    user_env = [dict(e) for e in container.get("env") or [] if isinstance(e, Mapping)]
    for entry in user_env:
        if entry.get("name") in OWNED_ENV:
            raise specs.SpecError("podTemplate.spec.containers",
                                  f"env {entry.get('name')} is set by the operator")
    env = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("JOBWARDEN_HOST", "metadata.name"),
        _env("JOBWARDEN_JOB_ID", str(run.job_id)),
        _env("JOBWARDEN_CLAIM_TOKEN", run.claim_token),
        _env("JOBWARDEN_DSN_FILE", f"{pools_spec.DSN_MOUNT}/{spec.dsn_key}"),
    ]
    if run.lease_token is not None:
        env.append(_env("JOBWARDEN_LEASE_TOKEN", str(run.lease_token)))
    container["env"] = env + user_env

    mounts = [m for m in container.get("volumeMounts") or []
              if m.get("name") != pools_spec.DSN_VOLUME]
    mounts.append({"name": pools_spec.DSN_VOLUME, "mountPath": pools_spec.DSN_MOUNT,
                   "readOnly": True})
    volumes = [v for v in pod.get("volumes") or [] if v.get("name") != pools_spec.DSN_VOLUME]
    volumes.append({"name": pools_spec.DSN_VOLUME, "secret": {
        "secretName": spec.dsn_secret,
        "items": [{"key": spec.dsn_key, "path": spec.dsn_key}]}})
    if not any(m.get("mountPath") == "/tmp" for m in mounts) and not any(
            v.get("name") == pools_spec.TMP_VOLUME for v in volumes):
        mounts.append({"name": pools_spec.TMP_VOLUME, "mountPath": "/tmp"})
        volumes.append({"name": pools_spec.TMP_VOLUME, "emptyDir": {}})
    container["volumeMounts"] = mounts
    pod["volumes"] = volumes
    pools_spec.restrict(pod)
    pod["restartPolicy"] = "Never"

    meta = dict(template.get("metadata") or {})
    name = pod_name(owner, run)
    labels = pools_spec.pod_labels(meta.get("labels"), owner=owner.name, owned={
        **COMMON_LABELS, POD_RUN_LABEL: owner.uid, JOB_ID_LABEL: str(run.job_id),
        ATTEMPT_LABEL: str(run.attempt), KIND_LABEL: owner.kind,
        OWNER_LABEL: pools_spec.label_value(owner.name)})
    annotations = {**dict(meta.get("annotations") or {}),
                   POD_RUN_ANNOTATION: owner.pod_run,
                   CLAIMED_AT_ANNOTATION: f"{claimed_at:.3f}"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": owner.namespace, "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": owner.kind,
                                 "name": owner.name, "uid": owner.uid, "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": pod,
    }


def run_of(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(job id, attempt)`` from a run pod's labels, None for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return int(labels[JOB_ID_LABEL]), int(labels[ATTEMPT_LABEL])
    except (KeyError, TypeError, ValueError):
        return None
