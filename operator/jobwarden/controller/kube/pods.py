"""The operator's pod calls, through its Kubernetes client: one adapter for every kind.

Worker pods (WorkerPool) and run pods (JobSchedule / ExclusiveJob pod runs)
are created, read, annotated and deleted through this one class, dicts in and
out (``_preload_content=False``), along with the two other objects a pod
needs: its PodDisruptionBudget and the keys of its DSN Secret. What a refusal
means (a 409 for a run pod's create, a 404 for an annotation) is the caller's
decision: the adapter only turns a missing object into None where a read or a
delete asks about existence.
"""

from __future__ import annotations

import json
from typing import Any

from jobwarden.controller.kube.client import CoreCalls, KubeClient, status_of


class KubePods:
    def __init__(self, client: KubeClient | None = None) -> None:
        self.client = client or KubeClient()

    def core(self) -> CoreCalls:
        return self.client.core()

    def _policy(self) -> Any:
        import kubernetes

        return kubernetes.client.PolicyV1Api(self.client.api_client())

    def list(self, namespace: str, *, selector: str,
             owner_uid: str | None = None) -> list[dict[str, Any]]:
        """The pods matching the label selector (only those ``owner_uid`` owns, if given)."""
        response = self.core().call("GET", namespace, "pods",
                                    query={"labelSelector": selector})
        items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
        if owner_uid is None:
            return list(items)
        return [p for p in items
                if any(ref.get("uid") == owner_uid
                       for ref in (p.get("metadata") or {}).get("ownerReferences") or [])]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod of that name, None when there is none (404)."""
        try:
            response = self.core().call("GET", namespace, "pods", name)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def create(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the pod; the pod as the API server stored it."""
        response = self.core().call("POST", namespace, "pods", body=manifest)
        return dict(json.loads(response.data))

    def delete(self, namespace: str, name: str, *, grace: int | None = None
               ) -> dict[str, Any] | None:
        """Delete the pod; the terminating pod, or None when it is gone at once (or was)."""
        try:
            response = self.core().call("DELETE", namespace, "pods", name,
                                        query={"gracePeriodSeconds": grace})
        except Exception as exc:
            if status_of(exc) != 404:
                raise
            return None
        body = json.loads(response.data)
        return dict(body) if isinstance(body, dict) and body.get("kind") == "Pod" else None

    def annotate(self, namespace: str, name: str, annotations: dict[str, str]
                 ) -> dict[str, Any]:
        """Annotate the pod; the pod as patched."""
        response = self.core().call(
            "PATCH", namespace, "pods", name, body={"metadata": {"annotations": annotations}},
            content_type="application/strategic-merge-patch+json")
        return dict(json.loads(response.data))

    def pdb(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The PodDisruptionBudget called ``name``, None if there is none."""
        try:
            response = self._policy().read_namespaced_pod_disruption_budget(
                name, namespace, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def put_pdb(self, namespace: str, manifest: dict[str, Any], *, exists: bool) -> None:
        api = self._policy()
        name = manifest["metadata"]["name"]
        if exists:
            api.patch_namespaced_pod_disruption_budget(name, namespace, manifest,
                                                       _preload_content=False)
        else:
            api.create_namespaced_pod_disruption_budget(namespace, manifest,
                                                        _preload_content=False)

    def delete_pdb(self, namespace: str, name: str) -> None:
        try:
            self._policy().delete_namespaced_pod_disruption_budget(name, namespace,
                                                                   _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 404:
                raise

    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The keys of a Secret (never its values), None if it does not exist.

        Raises PermissionError when RBAC does not allow the read (the chart grants
        ``get secrets``; a cluster that removed it gets an Unknown condition).
        """
        try:
            response = self.core().call("GET", namespace, "secrets", name)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            if status_of(exc) == 403:
                raise PermissionError(str(getattr(exc, "reason", exc))) from exc
            raise
        body = json.loads(response.data)
        return frozenset((body.get("data") or {}).keys()) | \
            frozenset((body.get("stringData") or {}).keys())
