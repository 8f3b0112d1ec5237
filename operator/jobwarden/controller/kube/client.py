"""The Kubernetes client the operator's own calls use (kopf has its own connection).

One lazily built ``ApiClient`` per operator: in-cluster credentials when the
process runs in a pod, else ``KUBECONFIG`` as kubectl reads it; an operator
embedded with its own kopf login (``Operator(login=...)``) connects as that
login says, as kopf does (the status writes and pod calls are this client's). Bodies go in and
come out as plain dicts (``_preload_content=False``): the reconcilers work on
manifests, not on the generated model classes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import kopf

MERGE_PATCH = "application/merge-patch+json"


class KubeClient:
    def __init__(self, login: Callable[..., kopf.ConnectionInfo | None] | None = None
                 ) -> None:
        self._api: Any = None
        self._lock = threading.Lock()
        self._login = login

    def api_client(self) -> Any:
        with self._lock:
            if self._api is None:
                import kubernetes

                info = self._login(logger=logging.getLogger("jobwarden.controller.kube")) \
                    if self._login is not None else None
                if info is not None:
                    self._api = kubernetes.client.ApiClient(configuration_of(info))
                    return self._api
                try:
                    configuration = kubernetes.client.Configuration()
                    kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                        client_configuration=configuration)
                    self._api = kubernetes.client.ApiClient(configuration)
                except kubernetes.config.ConfigException:
                    self._api = kubernetes.config.new_client_from_config()  # type: ignore[no-untyped-call]
            return self._api

    def core(self) -> CoreCalls:
        return CoreCalls(self.api_client())

    def custom(self) -> Any:
        import kubernetes

        return kubernetes.client.CustomObjectsApi(self.api_client())


class CoreCalls:
    """The operator's core/v1 calls (pods, Secrets, Events) through the ``ApiClient``.

    Not the generated ``CoreV1Api``: importing that module (every core/v1 operation, each
    wrapped in pydantic's ``validate_call``) cost ~1.4 CPU-seconds in every operator
    process, more than the rest of its imports together (docs/testing.md). A call answers
    as the generated ones do with ``_preload_content=False``: the urllib3 response
    (``.data``) on a 2xx, else an ``ApiException`` with the status and body.
    """

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def call(self, method: str, namespace: str, plural: str, name: str | None = None, *,
             query: dict[str, Any] | None = None, body: Any = None,
             content_type: str = "application/json") -> Any:
        import kubernetes

        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/{plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method, resource_path=path, header_params=headers, body=body,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        if not 200 <= response.status <= 299:
            response.read()
            raise kubernetes.client.ApiException.from_response(
                http_resp=response, body=None, data=None)
        return response.response


def configuration_of(info: kopf.ConnectionInfo) -> Any:
    """The Kubernetes client's configuration for a kopf login's connection (the paths of
    certificates; kopf's inline ``*_data`` are not taken)."""
    import kubernetes

    if info.ca_data or info.certificate_data or info.private_key_data:
        raise ValueError("a login with inline certificate data is not supported by the "
                         "operator's client; give the files' paths")
    configuration = kubernetes.client.Configuration()
    configuration.host = info.server
    if info.token:
        configuration.api_key = {"authorization": info.token}
        configuration.api_key_prefix = {"authorization": info.scheme or "Bearer"}
    configuration.username, configuration.password = info.username, info.password
    configuration.verify_ssl = not info.insecure
    configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file = (
        None if path is None else os.fsdecode(path)
        for path in (info.ca_path, info.certificate_path, info.private_key_path))
    configuration.proxy = info.proxy_url
    return configuration


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a refused call, None for anything else."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_reason(exc: BaseException) -> str:
    """The API server's message of a refused call (its Status body), else the exception."""
    body = getattr(exc, "body", None)
    if body:
        try:
            decoded = json.loads(body)
        except (TypeError, ValueError):
            return str(body)[:500]
        if isinstance(decoded, dict) and decoded.get("message"):
            return str(decoded["message"])[:500]
    return str(exc)[:500]


class CustomObjects:
    """GET and status PATCH of one namespaced custom resource (dicts in and out)."""

    def __init__(self, client: KubeClient, resource: tuple[str, str, str]) -> None:
        self.client = client
        self.group, self.version, self.plural = resource

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, None when it does not exist (404)."""
        try:
            response = self.client.custom().get_namespaced_custom_object(
                self.group, self.version, namespace, self.plural, name,
                _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def list(self, namespaces: Sequence[str] = (), *, page: int = 500
             ) -> list[dict[str, Any]]:
        """Every object in ``namespaces`` (all of them when empty), ``page`` a request."""
        found: list[dict[str, Any]] = []
        api = self.client.custom()
        scopes: list[str | None] = list(namespaces) or [None]
        for namespace in scopes:
            token: str | None = None
            while True:
                options: dict[str, Any] = {"limit": page, "_preload_content": False}
                if token:
                    options["_continue"] = token
                if namespace is None:
                    response = api.list_cluster_custom_object(
                        self.group, self.version, self.plural, **options)
                else:
                    response = api.list_namespaced_custom_object(
                        self.group, self.version, namespace, self.plural, **options)
                answer = json.loads(response.data)
                # A list's items carry no apiVersion and kind (a watch event's body does).
                kind = str(answer.get("kind") or "").removesuffix("List")
                for item in answer.get("items") or []:
                    item.setdefault("apiVersion", answer.get("apiVersion"))
                    item.setdefault("kind", kind)
                    found.append(item)
                token = (answer.get("metadata") or {}).get("continue")
                if not token:
                    break
        return found

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        """A JSON merge patch of ``.status``; the updated object, None when it is gone."""
        try:
            response = self.client.custom().patch_namespaced_custom_object_status(
                self.group, self.version, namespace, self.plural, name, {"status": status},
                _content_type=MERGE_PATCH, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def delete(self, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete the object (background propagation); False when it was gone already.

        With ``uid`` the deletion is preconditioned on it: a new object of the same
        name (someone re-applied the manifest) is not deleted in its place.
        """
        import kubernetes

        body = kubernetes.client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=kubernetes.client.V1Preconditions(uid=uid) if uid else None)
        try:
            self.client.custom().delete_namespaced_custom_object(
                self.group, self.version, namespace, self.plural, name, body=body,
                _preload_content=False)
        except Exception as exc:
            if status_of(exc) in (404, 409):
                return False
            raise
        return True
