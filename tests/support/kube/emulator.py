"""A Kubernetes API server for tests: kmock's emulator with the semantics clients rely on.

kmock (``kmock.KubernetesEmulator``) gives us the HTTP server, request
recording, the reaction DSL for fault injection and an object store with
history. Its own request handling is a dict store: patches are deep merges,
lists carry no ``kind``, there is no ``uid``, ``generation`` or
``resourceVersion``, watches cannot resume, status is not isolated, and
discovery guesses kinds. kubectl and kopf both depend on those details, so this
subclass keeps kmock's machinery and replaces the request semantics with one
low-priority fallback reaction (``_serve``). Reactions a test adds through the
DSL (``emulator['patch', kmock.resource(...)] << 500``) still win over it.

What the fallback implements (see docs/testing-kubernetes.md for the list of
deliberate gaps):

- discovery: ``/api``, ``/apis``, ``/apis/<g>``, ``/api/v1``, ``/apis/<g>/<v>``
  and the aggregated v2 documents kubectl asks for first;
- metadata: ``uid``, ``creationTimestamp``, ``generation`` (bumped when
  anything but metadata, and status where it is a subresource, changes),
  ``resourceVersion`` from one monotonic counter, no write for a no-op update;
- create / get / list / replace / patch (merge, strategic merge, JSON patch,
  server-side apply without field ownership) / delete / deletecollection;
- the status subresource, label and field selectors, Tables for ``kubectl get``;
- watches that resume from a ``resourceVersion``, ``timeoutSeconds``,
  ``sendInitialEvents`` bookmarks, selector transitions (ADDED/DELETED when an
  object starts or stops matching);
- finalizers and ``deletionTimestamp``; background, foreground and orphan
  propagation with garbage collection by ``ownerReferences``; namespaces that
  must exist and that take their content with them;
- CRDs: loaded from files or created through the API, registered for discovery,
  with schema defaults applied on create and update.

Every state change runs synchronously on the server's event loop (no ``await``
between reading and writing), so a watch that snapshots and subscribes in one
step never misses or duplicates an event.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import gzip
import importlib.resources
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock
import kmock._internal.parsing
import yaml

from . import crds, patching, printing, selectors

# Groups in kmock's bundled (k3s-derived) discovery data that a vanilla cluster does not serve.
_FOREIGN_GROUPS = frozenset({"metrics.k8s.io", "gateway.networking.k8s.io"})
_DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"]}
_AGGREGATED_TYPE = "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"

CRD_RESOURCE = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = kmock.resource("", "v1", "namespaces")
PODS = kmock.resource("", "v1", "pods")


class ApiError(Exception):
    """A failure the API reports as a ``Status`` object with an HTTP code."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = (
            code,
            reason,
            message,
            dict(details or {}),
        )

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


@dataclass(frozen=True)
class WatchEvent:
    """One committed change: what watches replay and stream. ``old`` is the state before it."""

    revision: int
    resource: kmock.resource
    type: str
    object: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    resource: kmock.resource
    namespace: str | None
    name: str | None
    subresource: str | None


_kmock_parse_path = kmock._internal.parsing.parse_path


def _parse_path(path: str) -> kmock._internal.parsing.ParsedPath:
    """kmock 0.8's path parser, fixed for collections named ``namespaces``.

    kmock raises on ``/api/v1/namespaces`` (it expects a namespace name after the word), which
    turns ``kubectl get namespaces`` into a 500. Inputs that parsed before parse the same.
    """
    parts = path.strip("/").split("/")
    if parts[-1] == "namespaces" and len(parts) in (3, 4) and parts[0] in ("api", "apis"):
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        if len(parts) == (3 if parts[0] == "api" else 4):
            return kmock._internal.parsing.ParsedPath(group, version, "namespaces")
    return _kmock_parse_path(path)


kmock._internal.parsing.parse_path = _parse_path


def now_rfc3339() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_version_of(resource: kmock.resource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)


def _without(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with the fidelity kubectl and kopf need (see the module doc)."""

    server_version: dict[str, str] = attrs.field(
        factory=lambda: {
            "major": "1",
            "minor": "36",
            "gitVersion": "v1.36.0-kmock",
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2025-08-27T00:00:00Z",
            "goVersion": "go1.24.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    )
    _revision: int = attrs.field(default=0, init=False)
    _log: list[WatchEvent] = attrs.field(factory=list, init=False)
    _watchers: set[asyncio.Queue[WatchEvent | None]] = attrs.field(factory=set, init=False)
    _custom: dict[kmock.resource, crds.CustomVersion] = attrs.field(factory=dict, init=False)
    _listeners: list[Callable[[], None]] = attrs.field(factory=list, init=False)
    _gc_scheduled: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        # Deliberately not kmock's fallbacks: they mutate state before the DSL reactions run and
        # answer with kmock's simplified semantics. One dispatcher at the lowest priority instead.
        self.fallback << self._serve
        bundled = (
            importlib.resources.files("kmock._internal").joinpath("resources.json.gz").read_bytes()
        )
        self._resources.load_data(
            gzip.decompress(bundled)
        )  # load_bundled(), minus its deprecation warning
        for resource in list(self._resources):
            if resource.group in _FOREIGN_GROUPS:
                del self._resources[resource]
        for namespace in _DEFAULT_NAMESPACES:
            self.create_object(NAMESPACES, None, {"metadata": {"name": namespace}})

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # Skip KubernetesEmulator._handle, which stores objects before any reaction is consulted;
        # here state changes only when the fallback serves the request.
        return await kmock.RawHandler._handle(self, request)

    # ------------------------------------------------------------------ registry

    @property
    def revision(self) -> int:
        """The last committed resourceVersion (the ``metadata.resourceVersion`` of lists)."""
        return self._revision

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every committed change (used to wake synchronous waiters)."""
        self._listeners.append(callback)

    def register_crd(self, crd: Mapping[str, Any]) -> list[kmock.resource]:
        registered = []
        for version in crds.versions_of(crd):
            self._resources[version.resource] = version.info
            self._custom[version.resource] = version
            registered.append(version.resource)
        return registered

    def unregister_crd(self, crd: Mapping[str, Any]) -> None:
        for version in crds.versions_of(crd):
            for key, obj in list(self._objects.items()):
                if key[0] == version.resource and not obj.deleted:
                    self._commit(version.resource, key, None, "DELETED", obj.raw)
            self._resources.pop(version.resource, None)
            self._custom.pop(version.resource, None)

    def info(self, resource: kmock.resource) -> kmock.ResourceInfo:
        if resource not in self._resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self._resources[resource]

    def resolve(self, name: str) -> kmock.resource:
        """A resource by plural, singular, short name or kind, optionally ``.group``-qualified."""
        parsed = kmock.resource(name)
        candidates = []
        for resource in self._resources:
            info = self._resources[resource]
            if (
                parsed.version is not None
                and parsed.group is not None
                and parsed.plural is not None
            ):
                if resource == parsed:
                    return resource
                continue
            plain, _, group = name.partition(".")
            if group and resource.group != group and not resource.group.startswith(group):
                continue
            plain = plain.lower()
            names = {resource.plural, info.singular, (info.kind or "").lower(), *info.shortnames}
            if plain in names:
                candidates.append(resource)
        if not candidates:
            raise KeyError(f"no resource is known as {name!r}")
        # Prefer the core group, then the preferred version, as kubectl does.
        return sorted(
            candidates, key=lambda r: (r.group != "", crds.version_priority(r.version or ""))
        )[0]

    def _resource_for_kind(self, api_version: str, kind: str) -> kmock.resource:
        group, _, version = api_version.rpartition("/")
        for resource in self._resources:
            info = self._resources[resource]
            if resource.group == group and resource.version == version and info.kind == kind:
                return resource
        raise KeyError(f"no resource serves {api_version} {kind}")

    def resource_for(self, obj: Mapping[str, Any]) -> kmock.resource:
        return self._resource_for_kind(obj.get("apiVersion", ""), obj.get("kind", ""))

    # ------------------------------------------------------------------ the store

    def _key(self, resource: kmock.resource, namespace: str | None, name: str) -> tuple[Any, ...]:
        return (resource, namespace if self.info(resource).namespaced else None, name)

    def get_object(
        self, resource: kmock.resource, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        key = self._key(resource, namespace, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return copy.deepcopy(self._objects[key].raw)

    def list_objects(
        self,
        resource: kmock.resource,
        namespace: str | None = None,
        predicate: Callable[[Mapping[str, Any]], bool] = lambda _: True,
    ) -> list[dict[str, Any]]:
        result = []
        for (res, ns, _), obj in self._objects.items():
            if res == resource and not obj.deleted and (namespace is None or ns == namespace):
                raw = obj.raw
                if predicate(raw):
                    result.append(copy.deepcopy(raw))
        return result

    def _all_live(self) -> Iterable[tuple[tuple[Any, ...], dict[str, Any]]]:
        for key, obj in list(self._objects.items()):
            if not obj.deleted:
                yield key, obj.raw

    def _commit(
        self,
        resource: kmock.resource,
        key: tuple[Any, ...],
        new: dict[str, Any] | None,
        event_type: str,
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Write one change: bump the revision, store it, log it, fan it out to watches."""
        self._revision += 1
        final = copy.deepcopy(new if new is not None else old)
        assert final is not None
        final.setdefault("metadata", {})["resourceVersion"] = str(self._revision)
        if event_type == "DELETED":
            self._objects[key].delete()
        elif key in self._objects:
            self._objects[key].history.append(copy.deepcopy(final))
        else:
            self._objects[key] = copy.deepcopy(final)
        event = WatchEvent(
            self._revision, resource, event_type, copy.deepcopy(final), copy.deepcopy(old)
        )
        self._log.append(event)
        for queue in self._watchers:
            queue.put_nowait(event)
        for listener in self._listeners:
            listener()
        if event_type == "DELETED":
            self._schedule_gc()
        return final

    # ------------------------------------------------------------------ writes

    def create_object(
        self,
        resource: kmock.resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        info = self.info(resource)
        obj: dict[str, Any] = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        obj["apiVersion"], obj["kind"] = api_version_of(resource), info.kind
        if info.namespaced:
            namespace = namespace or meta.get("namespace")
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request",
                )
            if not namespace:
                raise ApiError(400, "BadRequest", "the namespace of the object is required")
            meta["namespace"] = namespace
            owner_ns = self.get_object(NAMESPACES, None, namespace)
            if owner_ns is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f'namespaces "{namespace}" not found',
                    {"name": namespace, "kind": "namespaces"},
                )
            if owner_ns["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f"unable to create new content in namespace {namespace} "
                    "because it is being terminated",
                )
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_ALPHABET, k=5))
        name = meta.get("name")
        if not name:
            raise ApiError(
                422,
                "Invalid",
                f"{info.kind} is invalid: metadata.name: Required value: "
                "name or generateName is required",
            )
        key = self._key(resource, namespace, name)
        if key in self._objects and not self._objects[key].deleted:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{self._qualified(resource)} "{name}" already exists',
                {"name": name, "group": resource.group, "kind": resource.plural},
            )
        for field in (
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        custom = self._custom.get(resource)
        if custom is not None:
            if custom.status_subresource:
                obj.pop("status", None)  # the real server ignores status on create
            obj = crds.apply_defaults(obj, custom.schema)
        elif resource == PODS:
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        elif resource == NAMESPACES:
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        if resource == CRD_RESOURCE:
            self._prepare_crd(obj)
        if dry_run:
            return obj
        created = self._commit(resource, key, obj, "ADDED", None)
        if resource == CRD_RESOURCE:
            self.register_crd(created)
        return created

    def _prepare_crd(self, crd: dict[str, Any]) -> None:
        try:
            versions = crds.versions_of(crd)
        except ValueError as exc:
            raise ApiError(422, "Invalid", f"CustomResourceDefinition is invalid: {exc}") from exc
        names = crd["spec"]["names"]
        expected = f"{names['plural']}.{crd['spec']['group']}"
        if crd["metadata"]["name"] != expected:
            raise ApiError(
                422,
                "Invalid",
                f'CustomResourceDefinition.apiextensions.k8s.io "{crd["metadata"]["name"]}"'
                f' is invalid: metadata.name: must be spec.names.plural+"."+spec.group',
            )
        transition = now_rfc3339()
        crd["status"] = {
            "acceptedNames": {**names, "singular": versions[0].info.singular if versions else ""},
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": transition,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": transition,
                },
            ],
        }

    def update_object(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        candidate: Mapping[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object with ``candidate`` under the API's rules for what may change."""
        info = self.info(resource)
        key = self._key(resource, namespace, name)
        current = self.get_object(resource, namespace, name)
        if current is None:
            raise self._not_found(resource, name)
        new: dict[str, Any] = copy.deepcopy(dict(candidate))
        new_meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        old_meta = current["metadata"]
        if new_meta.get("name", name) != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        wanted_rv = new_meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old_meta.get("resourceVersion"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {self._qualified(resource)} "{name}": '
                "the object has been modified; please apply your changes to the "
                "latest version and try again",
                {"name": name, "group": resource.group, "kind": resource.plural},
            )
        has_status = "status" in info.subresources
        if subresource == "status" and has_status:
            # Only .status may change through /status: everything else comes from storage.
            status = new.get("status")
            new = copy.deepcopy(current)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is not None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({subresource})"
            )
        else:
            if has_status:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            for field in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "name",
                "generation",
            ):
                if field in old_meta:
                    new_meta[field] = old_meta[field]
                else:
                    new_meta.pop(field, None)
            new["metadata"] = new_meta
            if old_meta.get("deletionTimestamp"):
                added = set(new_meta.get("finalizers") or []) - set(
                    old_meta.get("finalizers") or []
                )
                if added:
                    raise ApiError(
                        422,
                        "Invalid",
                        f'{info.kind} "{name}" is invalid: metadata.finalizers: '
                        "Forbidden: no new finalizers can be added if the object "
                        "is being deleted",
                    )
        new["apiVersion"], new["kind"] = api_version_of(resource), info.kind
        new["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        custom = self._custom.get(resource)
        if custom is not None:
            new = crds.apply_defaults(new, custom.schema)
        ignored = ("metadata", "status") if has_status else ("metadata",)
        if _without(new, *ignored) != _without(current, *ignored):
            new["metadata"]["generation"] = int(old_meta.get("generation", 0)) + 1
        if not new["metadata"].get("finalizers"):
            new["metadata"].pop("finalizers", None)
        if not new["metadata"].get("ownerReferences"):
            new["metadata"].pop("ownerReferences", None)
        if new == current or dry_run:
            return new  # a no-op write is not a write: no new resourceVersion, no event
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(resource, key, new, "DELETED", current)
        updated = self._commit(resource, key, new, "MODIFIED", current)
        if resource == CRD_RESOURCE:
            self.register_crd(updated)
        return updated

    def patch_object(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str = patching.MERGE_PATCH,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        current = self.get_object(resource, namespace, name)
        if current is None:
            if content_type == patching.APPLY_PATCH and subresource is None:
                body = dict(patch)
                body.setdefault("metadata", {}).setdefault("name", name)
                return self.create_object(resource, namespace, body, dry_run=dry_run)
            raise self._not_found(resource, name)
        try:
            if content_type == patching.MERGE_PATCH:
                candidate = patching.merge_patch(current, patch)
            elif content_type == patching.STRATEGIC_MERGE_PATCH:
                if resource in self._custom:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types "
                        "include: application/json-patch+json, application/merge-patch+json, "
                        "application/apply-patch+yaml",
                    )
                candidate = patching.strategic_merge_patch(current, patch)
            elif content_type == patching.JSON_PATCH:
                candidate = patching.json_patch(current, patch)
            elif content_type == patching.APPLY_PATCH:
                candidate = patching.apply_patch(current, patch)
            else:
                raise ApiError(
                    415, "UnsupportedMediaType", f"unsupported patch type: {content_type}"
                )
        except patching.PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from exc
        if not isinstance(candidate, dict):
            raise ApiError(422, "Invalid", "the patch did not produce an object")
        return self.update_object(
            resource, namespace, name, candidate, subresource=subresource, dry_run=dry_run
        )

    def delete_object(
        self,
        resource: kmock.resource,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        options = options or {}
        key = self._key(resource, namespace, name)
        current = self.get_object(resource, namespace, name)
        if current is None:
            raise self._not_found(resource, name)
        meta = current["metadata"]
        preconditions = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if preconditions.get(field) and preconditions[field] != meta.get(field):
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: {field} in precondition: "
                    f"{preconditions[field]}, {field} in object meta: {meta.get(field)}",
                )
        policy = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else "Background"
        )
        if dry_run:
            return current
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self._dependents_of(meta["uid"])
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        if not finalizers and resource != NAMESPACES:
            return self._commit(resource, key, None, "DELETED", current)
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return current  # already terminating: deleting again changes nothing
        new = copy.deepcopy(current)
        new_meta = new["metadata"]
        new_meta.setdefault("deletionTimestamp", now_rfc3339())
        new_meta.setdefault("deletionGracePeriodSeconds", 0)
        if not meta.get("deletionTimestamp"):
            new_meta["generation"] = int(meta.get("generation", 0)) + 1  # as the real registry does
        if finalizers:
            new_meta["finalizers"] = finalizers
        if resource == NAMESPACES:
            new["status"] = {"phase": "Terminating"}
        updated = self._commit(resource, key, new, "MODIFIED", current)
        self._schedule_gc()
        return updated

    def _not_found(self, resource: kmock.resource, name: str) -> ApiError:
        return ApiError(
            404,
            "NotFound",
            f'{self._qualified(resource)} "{name}" not found',
            {"name": name, "group": resource.group, "kind": resource.plural},
        )

    def _qualified(self, resource: kmock.resource) -> str:
        return f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)

    # ------------------------------------------------------------------ garbage collection

    def _dependents_of(self, uid: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [
            (key, raw)
            for key, raw in self._all_live()
            if any(ref.get("uid") == uid for ref in raw["metadata"].get("ownerReferences") or [])
        ]

    def _orphan_dependents(self, uid: str) -> None:
        for (resource, namespace, name), raw in self._dependents_of(uid):
            refs = [
                ref for ref in raw["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid
            ]
            candidate = copy.deepcopy(raw)
            candidate["metadata"]["ownerReferences"] = refs
            self.update_object(resource, namespace, name, candidate)

    def _schedule_gc(self) -> None:
        # The real garbage collector is a controller that acts shortly after the owner is gone;
        # running it as a separate loop callback keeps that asynchrony (tests must wait for it).
        if self._gc_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # used outside the server loop (e.g. while being constructed)
            self._collect_garbage()
            return
        self._gc_scheduled = True
        loop.call_soon(self._collect_garbage)

    def _collect_garbage(self) -> None:
        self._gc_scheduled = False
        while self._collect_one():
            pass

    def _collect_one(self) -> bool:
        """Take one garbage-collection step; ``True`` if it changed anything (then look again)."""
        live = dict(self._all_live())
        by_uid = {raw["metadata"]["uid"]: raw for raw in live.values()}
        for (resource, namespace, name), raw in live.items():
            meta = raw["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp"):
                solid = [
                    r for r in refs if r.get("uid") in by_uid and not _foreground(by_uid[r["uid"]])
                ]
                waiting = [
                    r for r in refs if r.get("uid") in by_uid and _foreground(by_uid[r["uid"]])
                ]
                if not solid:
                    policy = "Foreground" if waiting else "Background"
                    self.delete_object(resource, namespace, name, {"propagationPolicy": policy})
                    return True
                if len(solid) != len(refs) and not waiting:
                    candidate = copy.deepcopy(raw)
                    candidate["metadata"]["ownerReferences"] = solid
                    self.update_object(resource, namespace, name, candidate)
                    return True
            if _foreground(raw) and not self._dependents_of(meta["uid"]):
                candidate = copy.deepcopy(raw)
                candidate["metadata"]["finalizers"] = [
                    f for f in meta["finalizers"] if f != "foregroundDeletion"
                ]
                self.update_object(resource, namespace, name, candidate)
                return True
            if (
                resource == NAMESPACES
                and meta.get("deletionTimestamp")
                and self._finalize_namespace(name, raw)
            ):
                return True
        return False

    def _finalize_namespace(self, namespace: str, raw: dict[str, Any]) -> bool:
        content = [
            (key, obj)
            for key, obj in self._all_live()
            if key[1] == namespace and key[0] != NAMESPACES
        ]
        changed = False
        for (resource, ns, name), obj in content:
            if not obj["metadata"].get("deletionTimestamp"):
                self.delete_object(resource, ns, name)
                changed = True
        if not content and not raw["metadata"].get("finalizers"):
            self._commit(NAMESPACES, (NAMESPACES, None, namespace), None, "DELETED", raw)
            changed = True
        return changed

    # ------------------------------------------------------------------ HTTP

    async def _serve(self, request: kmock.Request) -> kmock.Response:
        try:
            return await self._route(request)
        except ApiError as exc:
            return kmock.Response(status=exc.code, payload=exc.status())
        except (selectors.SelectorError, yaml.YAMLError, json.JSONDecodeError) as exc:
            return kmock.Response(
                status=400, payload=ApiError(400, "BadRequest", str(exc)).status()
            )

    async def _route(self, request: kmock.Request) -> kmock.Response:
        path = request.url.path.rstrip("/") or "/"
        method = request.method.value.upper()
        accept = request.headers.get("Accept", "")
        parts = path.strip("/").split("/")
        if method == "GET":
            if path == "/":
                return _json(self._root_paths())
            if path == "/version":
                return _json(self.server_version)
            if path in ("/healthz", "/livez", "/readyz"):
                return kmock.Response(status=200, payload=b"ok")
            if path == "/openapi/v3":
                return _json(self._openapi_index())
            if path.startswith("/openapi/v3/"):
                return _json(self._openapi_group_version(path.removeprefix("/openapi/v3/")))
            if path == "/api":
                return self._discovery_api(accept)
            if path == "/apis":
                return self._discovery_apis(accept)
            if parts[0] == "apis" and len(parts) == 2:
                return _json(self._api_group(parts[1]))
            if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
                group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
                return _json(self._resource_list(group, version))
        target = self._parse_target(parts)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        params = request.params
        dry_run = params.get("dryRun") == "All"
        if method == "GET" and (params.get("watch") in ("true", "1")):
            return self._watch_response(request, target)
        if method == "GET" and target.name is None:
            return self._list_response(target, params, accept)
        if method == "GET":
            obj = self.get_object(target.resource, target.namespace, target.name or "")
            if obj is None:
                raise self._not_found(target.resource, target.name or "")
            return self._object_response(target, obj, accept, params)
        if method == "POST" and target.name is None:
            return _json(
                self.create_object(
                    target.resource, target.namespace, _body(request), dry_run=dry_run
                ),
                status=201,
            )
        if method == "PUT" and target.name is not None:
            return _json(
                self.update_object(
                    target.resource,
                    target.namespace,
                    target.name,
                    _body(request),
                    subresource=target.subresource,
                    dry_run=dry_run,
                )
            )
        if method == "PATCH" and target.name is not None:
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            return _json(
                self.patch_object(
                    target.resource,
                    target.namespace,
                    target.name,
                    _body(request),
                    content_type=content_type,
                    subresource=target.subresource,
                    dry_run=dry_run,
                )
            )
        if method == "DELETE" and target.name is not None:
            options = dict(_body(request, default={}))
            for field in ("propagationPolicy", "gracePeriodSeconds"):
                if field in params:
                    options[field] = params[field]
            return _json(
                self.delete_object(
                    target.resource, target.namespace, target.name, options, dry_run=dry_run
                )
            )
        if method == "DELETE":
            return self._delete_collection(target, params, dry_run=dry_run)
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    def _parse_target(self, parts: list[str]) -> Target | None:
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        resource = kmock.resource(group, version, rest[0])
        self.info(resource)
        name = rest[1] if len(rest) >= 2 else None
        subresource = "/".join(rest[2:]) or None
        return Target(resource, namespace, name, subresource)

    def _object_response(
        self,
        target: Target,
        obj: dict[str, Any],
        accept: str,
        params: Mapping[str, str],
    ) -> kmock.Response:
        if "as=Table" in accept:
            return _json(self._table([obj], target.resource, params))
        return _json(obj)

    def _select(
        self, target: Target, params: Mapping[str, str]
    ) -> Callable[[Mapping[str, Any]], bool]:
        by_label = selectors.label_selector(params.get("labelSelector"))
        by_field = selectors.field_selector(params.get("fieldSelector"))
        name = target.name

        def predicate(obj: Mapping[str, Any]) -> bool:
            meta = obj.get("metadata", {})
            if target.namespace is not None and meta.get("namespace") != target.namespace:
                return False
            if name is not None and meta.get("name") != name:
                return False
            return by_label(obj) and by_field(obj)

        return predicate

    def _list_response(
        self, target: Target, params: Mapping[str, str], accept: str
    ) -> kmock.Response:
        items = self.list_objects(target.resource, target.namespace, self._select(target, params))
        if "as=Table" in accept:
            return _json(self._table(items, target.resource, params))
        info = self.info(target.resource)
        custom = self._custom.get(target.resource)
        if (
            custom is None
        ):  # built-in lists carry kind/apiVersion on the list only, as the real server does
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return _json(
            {
                "kind": custom.list_kind if custom else f"{info.kind}List",
                "apiVersion": api_version_of(target.resource),
                "metadata": {"resourceVersion": str(self._revision)},
                "items": items,
            }
        )

    def _table(
        self, objects: list[dict[str, Any]], resource: kmock.resource, params: Mapping[str, str]
    ) -> dict[str, Any]:
        custom = self._custom.get(resource)
        columns = printing.columns_for(
            resource.group or "", resource.plural or "", custom.printer_columns if custom else None
        )
        return printing.table(
            objects,
            columns=columns,
            resource_version=str(self._revision),
            include_object=params.get("includeObject", "Metadata"),
        )

    def _delete_collection(
        self, target: Target, params: Mapping[str, str], *, dry_run: bool
    ) -> kmock.Response:
        items = self.list_objects(target.resource, target.namespace, self._select(target, params))
        deleted = [
            self.delete_object(
                target.resource,
                item["metadata"].get("namespace"),
                item["metadata"]["name"],
                dry_run=dry_run,
            )
            for item in items
        ]
        info = self.info(target.resource)
        return _json(
            {
                "kind": f"{info.kind}List",
                "apiVersion": api_version_of(target.resource),
                "metadata": {"resourceVersion": str(self._revision)},
                "items": deleted,
            }
        )

    # ------------------------------------------------------------------ watch

    def _watch_response(self, request: kmock.Request, target: Target) -> kmock.Response:
        params = request.params
        timeout: float | None = None
        if params.get("timeoutSeconds"):
            # As kube-apiserver: an integer, or 400 (kopf once sent "300.0").
            try:
                timeout = float(int(params["timeoutSeconds"]))
            except ValueError:
                raise ApiError(400, "BadRequest", f'strconv.ParseInt: parsing '
                               f'"{params["timeoutSeconds"]}": invalid syntax') from None
        as_table = "as=Table" in request.headers.get("Accept", "")
        stream = self._watch_stream(
            request, target, self._select(target, params), params, timeout, as_table
        )
        return kmock.Response(
            status=200, headers={"Content-Type": "application/json"}, payload=stream
        )

    async def _watch_stream(
        self,
        request: kmock.Request,
        target: Target,
        predicate: Callable[[Mapping[str, Any]], bool],
        params: Mapping[str, str],
        timeout: float | None,
        as_table: bool,
    ) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        since = params.get("resourceVersion") or ""
        initial_events = params.get("sendInitialEvents") == "true"
        # Snapshot and subscribe in one synchronous step: nothing can commit in between.
        self._watchers.add(queue)
        try:
            backlog: list[tuple[str, dict[str, Any]]] = []
            if initial_events or since in ("", "0"):
                backlog = [
                    ("ADDED", obj)
                    for obj in self.list_objects(target.resource, target.namespace, predicate)
                ]
            else:
                start = int(since)
                backlog = [
                    (t, o)
                    for e in self._log
                    if e.revision > start and e.resource == target.resource
                    for t, o in [_transition(e, predicate)]
                    if t
                ]
            bookmark_rv = str(self._revision)
            yield b""  # send the headers now: clients see an open stream even if nothing happens
            for event_type, obj in backlog:
                yield self._watch_item(event_type, obj, target, params, as_table)
            if initial_events:
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": self.info(target.resource).kind,
                        "apiVersion": api_version_of(target.resource),
                        "metadata": {
                            "resourceVersion": bookmark_rv,
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    },
                }
            while True:
                wait = 1.0 if deadline is None else min(1.0, deadline - loop.time())
                if wait <= 0:
                    return
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=wait)
                except TimeoutError:
                    transport = (
                        request._raw_request.transport if request._raw_request is not None else None
                    )
                    if transport is None or transport.is_closing():
                        return  # the client went away
                    continue
                if event is None:
                    return  # the server is stopping
                if event.resource != target.resource:
                    continue
                event_type, obj = _transition(event, predicate)
                if event_type:
                    yield self._watch_item(event_type, obj, target, params, as_table)
        finally:
            self._watchers.discard(queue)

    def _watch_item(
        self,
        event_type: str,
        obj: dict[str, Any],
        target: Target,
        params: Mapping[str, str],
        as_table: bool,
    ) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        if as_table:
            return {"type": event_type, "object": self._table([obj], target.resource, params)}
        return {"type": event_type, "object": obj}

    def close_watches(self) -> None:
        """End every open watch stream (before the server stops, so it need not wait for them)."""
        for queue in self._watchers:
            queue.put_nowait(None)

    # ------------------------------------------------------------------ discovery

    def _root_paths(self) -> dict[str, Any]:
        paths = {"/api", "/api/v1", "/apis", "/version", "/healthz"}
        for resource in self._resources:
            if resource.group:
                paths |= {f"/apis/{resource.group}", f"/apis/{resource.group}/{resource.version}"}
        return {"paths": sorted(paths)}

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, set[str]] = {}
        for resource in self._resources:
            groups.setdefault(resource.group or "", set()).add(resource.version or "")
        return {g: sorted(vs, key=crds.version_priority) for g, vs in sorted(groups.items())}

    def _api_group(self, group: str) -> dict[str, Any]:
        versions = self._groups().get(group)
        if not versions or not group:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = sorted(
            (r for r in self._resources if r.group == group and r.version == version),
            key=lambda r: r.plural or "",
        )
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        entries: list[dict[str, Any]] = []
        for resource in resources:
            info = self._resources[resource]
            entries.append(
                {
                    "name": resource.plural,
                    "singularName": info.singular or "",
                    "namespaced": bool(info.namespaced),
                    "kind": info.kind,
                    "verbs": sorted(info.verbs),
                    "shortNames": sorted(info.shortnames),
                    "categories": sorted(info.categories),
                }
            )
            for sub in sorted(info.subresources):
                entries.append(
                    {
                        "name": f"{resource.plural}/{sub}",
                        "singularName": "",
                        "namespaced": bool(info.namespaced),
                        "kind": info.kind,
                        "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }

    def _aggregated_group(self, group: str, versions: list[str]) -> dict[str, Any]:
        result = []
        for version in versions:
            resources = []
            for resource in sorted(
                (r for r in self._resources if r.group == group and r.version == version),
                key=lambda r: r.plural or "",
            ):
                info = self._resources[resource]
                kind = {"group": group, "version": version, "kind": info.kind}
                resources.append(
                    {
                        "resource": resource.plural,
                        "responseKind": kind,
                        "scope": "Namespaced" if info.namespaced else "Cluster",
                        "singularResource": info.singular or "",
                        "verbs": sorted(info.verbs),
                        "shortNames": sorted(info.shortnames),
                        "categories": sorted(info.categories),
                        "subresources": [
                            {
                                "subresource": sub,
                                "responseKind": kind,
                                "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                            }
                            for sub in sorted(info.subresources)
                        ],
                    }
                )
            result.append({"version": version, "resources": resources, "freshness": "Current"})
        return {"metadata": {"name": group}, "versions": result}

    def _aggregated(self, accept: str, groups: dict[str, list[str]]) -> kmock.Response | None:
        for version in ("v2", "v2beta1"):
            if f"g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList" in accept.replace(
                " ", ""
            ):
                body = {
                    "kind": "APIGroupDiscoveryList",
                    "apiVersion": f"apidiscovery.k8s.io/{version}",
                    "metadata": {},
                    "items": [self._aggregated_group(g, vs) for g, vs in groups.items()],
                }
                return _json(body, content_type=_AGGREGATED_TYPE.format(version=version))
        return None

    def _openapi_index(self) -> dict[str, Any]:
        # kubectl reads OpenAPI v3 for one thing only: whether PATCH accepts ?fieldValidation,
        # to pick server-side validation. Without it, `kubectl apply` fails
        # ("failed to download openapi").
        paths = {}
        for group, versions in self._groups().items():
            for version in versions:
                prefix = f"apis/{group}/{version}" if group else f"api/{version}"
                paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={self._revision}"}
        return {"paths": paths}

    def _openapi_group_version(self, prefix: str) -> dict[str, Any]:
        parts = prefix.strip("/").split("/")
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        paths: dict[str, Any] = {}
        for resource in self._resources:
            if resource.group != group or resource.version != version:
                continue
            info = self._resources[resource]
            scope = "/namespaces/{namespace}" if info.namespaced else ""
            gvk = {"group": group, "version": version, "kind": info.kind}
            operation = {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "patch",
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string"}}
                    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
                ],
                "responses": {"200": {"description": "OK"}},
            }
            paths[f"/{prefix}{scope}/{resource.plural}/{{name}}"] = {"patch": operation}
        if not paths:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self.server_version["gitVersion"]},
            "paths": paths,
            "components": {"schemas": {}},
        }

    def _discovery_api(self, accept: str) -> kmock.Response:
        aggregated = self._aggregated(accept, {"": self._groups()[""]})
        return aggregated or _json(
            {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        )

    def _discovery_apis(self, accept: str) -> kmock.Response:
        groups = {g: vs for g, vs in self._groups().items() if g}
        aggregated = self._aggregated(accept, groups)
        return aggregated or _json(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._api_group(g) for g in groups],
            }
        )


def _foreground(raw: Mapping[str, Any]) -> bool:
    meta = raw.get("metadata", {})
    return bool(meta.get("deletionTimestamp")) and "foregroundDeletion" in (
        meta.get("finalizers") or []
    )


def _transition(
    event: WatchEvent, predicate: Callable[[Mapping[str, Any]], bool]
) -> tuple[str, dict[str, Any]]:
    """How a change looks to a filtered watch: entering the filter is ADDED, leaving it DELETED."""
    now = predicate(event.object)
    before = event.old is not None and predicate(event.old)
    if event.type == "DELETED":
        return ("DELETED" if before or now else ""), event.object
    if now and before:
        return "MODIFIED", event.object
    if now:
        return "ADDED", event.object
    if before:
        return "DELETED", event.object
    return "", event.object


def _json(
    payload: Any, *, status: int = 200, content_type: str = "application/json"
) -> kmock.Response:
    body = json.dumps(payload).encode("utf-8")
    return kmock.Response(status=status, headers={"Content-Type": content_type}, payload=body)


def _body(request: kmock.Request, default: Any = None) -> Any:
    if not request.body:
        if default is not None:
            return default
        raise ApiError(400, "BadRequest", "the request has no body")
    content_type = request.headers.get("Content-Type", "")
    if "yaml" in content_type:
        return yaml.safe_load(request.body)
    return json.loads(request.body)
