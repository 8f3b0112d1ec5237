"""CustomResourceDefinitions: what the API server learns from one, and schema defaulting.

A CRD is data for the emulator: its names feed discovery (so kubectl resolves
``js`` and kopf finds ``jobschedules/status``), its subresources decide whether
status is isolated, its printer columns feed tables, and its structural schema
supplies ``default`` values on create and update, as the real server does before
storing an object. CEL rules and type validation are not evaluated here; the
CRD tests of issue 6 check those against the schemas themselves.
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kmock

from tests.support import yamlio

_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first."""
    match = _VERSION_RE.match(version)
    if match is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match[2]]
    return (stage, -int(match[1]), -int(match[3] or 0), version)


@dataclass(frozen=True)
class CustomVersion:
    """One served version of a CRD, with what the emulator needs at request time."""

    resource: kmock.resource
    info: kmock.ResourceInfo
    list_kind: str
    status_subresource: bool
    printer_columns: list[dict[str, Any]] = field(default_factory=list)
    schema: dict[str, Any] = field(default_factory=dict)


def versions_of(crd: Mapping[str, Any]) -> list[CustomVersion]:
    """The served versions of a CRD object (``apiextensions.k8s.io/v1``), each a resource."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not group or not plural or not kind:
        raise ValueError("a CRD needs spec.group, spec.names.plural and spec.names.kind")
    result = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = set((version.get("subresources") or {}).keys())
        info = kmock.ResourceInfo(
            kind=kind,
            singular=names.get("singular") or kind.lower(),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            verbs={
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            },
            shortnames=set(names.get("shortNames") or []),
            categories=set(names.get("categories") or []),
            subresources=subresources,
        )
        result.append(
            CustomVersion(
                resource=kmock.resource(group, version["name"], plural),
                info=info,
                list_kind=names.get("listKind") or f"{kind}List",
                status_subresource="status" in subresources,
                printer_columns=list(version.get("additionalPrinterColumns") or []),
                schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
            )
        )
    return result


def load_documents(paths: Iterable[pathlib.Path]) -> list[dict[str, Any]]:
    """Every CRD document in the given YAML files or directories (other kinds are skipped).

    Each call returns new objects (the emulator stores and changes what it is given); a
    file's parse is kept per process, as JSON, by path and modification: an emulated API
    server starts in ~65 tests, and reading the 1 MB of CRDs took 0.27 CPU-s with libyaml
    where decoding the kept JSON takes ~0.02."""
    documents: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
        for file in files:
            stat = file.stat()
            documents.extend(json.loads(_crd_documents_json(file, stat.st_mtime_ns, stat.st_size)))
    return documents


@functools.cache
def _crd_documents_json(file: pathlib.Path, mtime_ns: int, size: int) -> str:
    """The CRD documents of one YAML file as a JSON array (``mtime_ns`` and ``size`` key
    the cache: a file edited during a run is read again)."""
    return json.dumps([document for document in yamlio.load_all(file.read_text(encoding="utf-8"))
                       if isinstance(document, dict)
                       and document.get("kind") == "CustomResourceDefinition"])


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Fill absent fields that have a ``default`` in a structural schema, recursively."""
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key, subschema in properties.items():
            if key == "metadata" and value is not None:
                continue  # the server never defaults metadata from a CRD schema
            if key not in value and "default" in subschema:
                value[key] = copy.deepcopy(subschema["default"])
            if key in value:
                value[key] = apply_defaults(value[key], subschema)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key in list(value):
                if key not in properties:
                    value[key] = apply_defaults(value[key], additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value
