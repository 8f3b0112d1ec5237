"""A small synchronous client of a real Kubernetes API server, for fixtures and the kubelet.

It speaks the same little vocabulary as the emulated API's facade
(``tests.support.kube.KubeAPI``: ``get``/``list``/``create``/``patch``/``delete`` by
resource name such as ``pods`` or ``workerpools``), so that the process
kubelet and the tests drive either one. Resource names resolve through the
server's discovery (refreshed on a miss, since CRDs appear during a test).
Why not the ``kubernetes`` package: its typed models would turn every manifest
into classes and back; tests want the JSON the server returns.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tests.support.waiting import wait_for

T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(RuntimeError):
    """The server answered with an error Status; ``code`` and ``reason`` come from it."""

    def __init__(self, code: int, body: Any, what: str) -> None:
        self.code = code
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{what}: {code} {self.reason}: {message}")


class RealKubeAPI:
    """HTTPS to one API server with a client certificate or a bearer token."""

    def __init__(self, host: str, port: int, *, ca: Path, cert: Path | None = None,
                 key: Path | None = None, token: str | None = None,
                 timeout: float = 30.0) -> None:
        self.host, self.port, self.timeout, self.token = host, port, timeout, token
        self.context = ssl.create_default_context(cafile=str(ca))
        if cert is not None:
            self.context.load_cert_chain(str(cert), str(key) if key else None)
        self._local = threading.local()
        self._resources: dict[str, tuple[str, str, bool]] = {}
        self._kinds: dict[tuple[str, str], tuple[str, str, bool]] = {}
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    # -- transport -------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                               timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", what: str = "") -> Any:
        """One call; the decoded JSON answer, or :class:`ApiError`."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, ConnectionError, ssl.SSLError, TimeoutError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if response.status >= 400:
            raise ApiError(response.status, decoded, what or f"{method} {path}")
        return decoded

    # -- discovery -------------------------------------------------------------------------

    def _discover(self) -> None:
        groups: list[tuple[str, str]] = [("", "v1")]
        for group in self.request("GET", "/apis")["groups"]:
            groups.append((group["name"], group["preferredVersion"]["version"]))
        resources: dict[str, tuple[str, str, bool]] = {}
        kinds: dict[tuple[str, str], tuple[str, str, bool]] = {}
        for group, version in groups:
            base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
            group_version = version if not group else f"{group}/{version}"
            try:
                listing = self.request("GET", base)
            except ApiError:
                continue
            for res in listing["resources"]:
                if "/" in res["name"]:
                    continue
                entry = (base, res["name"], bool(res["namespaced"]))
                resources.setdefault(res["name"], entry)
                resources[f"{group_version}/{res['name']}"] = entry
                if group:
                    resources.setdefault(f"{res['name']}.{group}", entry)
                for short in res.get("shortNames") or []:
                    resources.setdefault(short, entry)
                kinds[(group_version, res["kind"])] = entry
        with self._lock:
            self._resources, self._kinds = resources, kinds

    def resolve(self, resource: str) -> tuple[str, str, bool]:
        """(base path, plural, namespaced) of ``pods``, ``v1/events``, ``workerpools``..."""
        for attempt in (1, 2):
            with self._lock:
                found = self._resources.get(resource)
            if found is not None:
                return found
            if attempt == 1:
                self._discover()
        raise KeyError(f"no resource {resource!r} on the server")

    def resolve_kind(self, api_version: str, kind: str) -> tuple[str, str, bool]:
        for attempt in (1, 2):
            with self._lock:
                found = self._kinds.get((api_version, kind))
            if found is not None:
                return found
            if attempt == 1:
                self._discover()
        raise KeyError(f"no kind {api_version}/{kind} on the server")

    def path(self, resource: str, name: str | None = None, namespace: str | None = None, *,
             subresource: str | None = None) -> str:
        base, plural, namespaced = self.resolve(resource)
        return _path(base, plural, namespaced, name, namespace, subresource)

    # -- the facade ------------------------------------------------------------------------

    def get(self, resource: str, name: str, namespace: str | None = "default"
            ) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.request("GET", self.path(resource, name, namespace))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return found

    def list(self, resource: str, namespace: str | None = None, *,
             labels: str | None = None, fields: str | None = None) -> list[dict[str, Any]]:
        query = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        path = self.path(resource, None, namespace)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        items: list[dict[str, Any]] = self.request("GET", path)["items"]
        return items

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        base, plural, namespaced = self.resolve_kind(obj["apiVersion"], obj["kind"])
        namespace = namespace or obj.get("metadata", {}).get("namespace") or "default"
        created: dict[str, Any] = self.request(
            "POST", _path(base, plural, namespaced, None, namespace, None), dict(obj))
        return created

    def patch(self, resource: str, name: str, patch: Any, namespace: str | None = "default", *,
              subresource: str | None = None, content_type: str = MERGE_PATCH
              ) -> dict[str, Any]:
        patched: dict[str, Any] = self.request(
            "PATCH", self.path(resource, name, namespace, subresource=subresource), patch,
            content_type=content_type)
        return patched

    def post(self, resource: str, name: str, body: Any, namespace: str | None = "default", *,
             subresource: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.request(
            "POST", self.path(resource, name, namespace, subresource=subresource), body)
        return answer

    def delete(self, resource: str, name: str, namespace: str | None = "default", *,
               propagation: str | None = None, grace: int | None = None) -> dict[str, Any]:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            options["propagationPolicy"] = propagation
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        deleted: dict[str, Any] = self.request("DELETE", self.path(resource, name, namespace),
                                               options)
        return deleted

    def events(self, namespace: str | None = None, *, involved: str | None = None
               ) -> list[dict[str, Any]]:
        return [e for e in self.list("v1/events", namespace)
                if involved is None or e.get("involvedObject", {}).get("name") == involved]

    def wait(self, probe: Callable[[], T], *, timeout: float = 30.0,
             what: str = "a condition") -> T:
        """``probe()`` once truthy, polled every 0.2 s; AssertionError at the deadline."""
        return wait_for(probe, timeout=timeout, interval=0.2, message=what)


def _path(base: str, plural: str, namespaced: bool, name: str | None, namespace: str | None,
          subresource: str | None) -> str:
    parts = [base]
    if namespaced and namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name:
        parts.append(urllib.parse.quote(name))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)
