"""The four patch flavours of the Kubernetes API, as plain functions on JSON dicts.

kmock's emulator merges every patch as one recursive dict update, which is
enough for most mocks but not for the clients we test against: kubectl sends
JSON merge patches for custom resources and strategic merge patches for pods,
kopf sends merge patches, the Python client sends strategic merge patches by
default, and finalizer removal relies on list semantics that differ per flavour
(a merge patch replaces the whole ``finalizers`` list; a strategic merge patch
merges it). Each function returns a new object and never mutates its inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch  # a dependency of kmock itself

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# The merge keys of the built-in types' lists (patchMergeKey in the Go structs). Keyed by the
# field name alone: the same name means the same key everywhere in the core API, except
# ``ports``, where a Service's ports merge on ``port`` and a container's on ``containerPort``.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars whose patchStrategy is "merge": a patch adds to them instead of replacing.
_MERGED_SCALAR_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied (the API answers 422 or 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Mapping[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902, delegated to the ``jsonpatch`` library."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        result = jsonpatch.apply_patch(copy.deepcopy(dict(target)), operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise PatchError(str(exc)) from exc
    if not isinstance(result, dict):
        raise PatchError("a JSON patch must leave an object")
    return result


def strategic_merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The built-in types' patch: like a merge patch, but keyed lists merge item by item.

    Supports the directives kubectl and the Python client send: ``$patch: replace|delete``
    in maps and list items, ``$deleteFromPrimitiveList/<field>``, and it drops
    ``$setElementOrder/<field>`` and ``$retainKeys`` (ordering and pruning hints).
    """
    return _smp_map(dict(target), patch)


def _smp_map(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    result: dict[str, Any] = copy.deepcopy(dict(target))
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            doomed = value if isinstance(value, list) else []
            result[field] = [item for item in result.get(field, []) if item not in doomed]
            continue
        if value is None or (isinstance(value, Mapping) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, Mapping):
            current = result.get(key)
            result[key] = _smp_map(current if isinstance(current, Mapping) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    current: list[Any] = copy.deepcopy(target) if isinstance(target, list) else []
    if field in _MERGED_SCALAR_LISTS:
        return current + [item for item in patch if item not in current]
    merge_key = _MERGE_KEYS.get(field)
    if (
        field == "ports"
        and patch
        and isinstance(patch[0], Mapping)
        and "containerPort" not in patch[0]
    ):
        merge_key = "port"
    if merge_key is None or not all(isinstance(item, Mapping) for item in patch):
        return [item for item in copy.deepcopy(patch) if item != {"$patch": "replace"}]
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(item) for item in patch if item.get("$patch") != "replace"]
    for item in patch:
        key_value = item.get(merge_key)
        index = next(
            (
                i
                for i, old in enumerate(current)
                if isinstance(old, Mapping) and old.get(merge_key) == key_value
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
        elif index is None:
            current.append(_smp_map({}, item))
        else:
            current[index] = _smp_map(current[index], item)
    return current


def apply_patch(target: Mapping[str, Any] | None, applied: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply without field ownership: the applied configuration wins, nothing is pruned.

    Good enough for ``kubectl apply --server-side`` of a whole manifest; it does not track
    managers, so fields a previous apply set and this one omits stay in place.
    """
    return strategic_merge_patch(target or {}, applied)
