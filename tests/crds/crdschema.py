"""A small stand-in for the API server's handling of our CRD schemas.

Why it exists: there is no Kubernetes API server in the test environment, yet
the CRDs are the first line of input validation ("bad input gets a clear error
and changes nothing"). The API server does three things with a custom resource
before it is stored: it applies the schema's defaults, validates the object
against the structural OpenAPI schema, and evaluates the CEL rules in
``x-kubernetes-validations`` (transition rules, the ones that read ``oldSelf``,
only on updates). This module does the same three steps with real validators:
``jsonschema`` for the OpenAPI part and ``cel-python`` for the CEL rules.

Unknown fields are rejected, as ``kubectl apply`` does with its default strict
field validation, except under ``x-kubernetes-preserve-unknown-fields``.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"

Schema = dict[str, Any]

# Kubernetes escapes these property names in CEL (``__in__``); our schemas use none.
CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


def load_crds() -> dict[str, dict[str, Any]]:
    """Every CRD in ``crds/``, keyed by kind."""
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        # libyaml's loader: every pytest process loads the CRDs while collecting, and the
        # pure-Python one took 1.3 CPU-s of it (0.15 with libyaml).
        for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["spec"]["names"]["kind"]] = doc
    return crds


def version_of(crd: dict[str, Any], name: str = "v1alpha1") -> dict[str, Any]:
    for version in crd["spec"]["versions"]:
        if version["name"] == name:
            return dict(version)
    raise KeyError(name)


def schema_of(crd: dict[str, Any]) -> Schema:
    return dict(version_of(crd)["schema"]["openAPIV3Schema"])


# ---------------------------------------------------------------------------
# Structural schema rules (apiextensions "structural schema" definition).


def structural_errors(schema: Schema, path: str = "") -> list[str]:
    """Violations of the structural-schema rules the API server enforces.

    Every node has a type unless it preserves unknown fields or is
    int-or-string; no ``$ref``, ``additionalProperties`` beside ``properties``,
    ``nullable`` without a type, or defaults that the node itself would reject.
    """
    errors: list[str] = []
    where = path or "<root>"
    exempt = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
        "x-kubernetes-int-or-string"
    )
    if "type" not in schema and not exempt:
        errors.append(f"{where}: no type")
    for forbidden in ("$ref", "definitions", "dependencies", "patternProperties", "id"):
        if forbidden in schema:
            errors.append(f"{where}: {forbidden} is not allowed")
    if "properties" in schema and "additionalProperties" in schema:
        errors.append(f"{where}: properties and additionalProperties together")
    if schema.get("type") == "object" and "items" in schema:
        errors.append(f"{where}: items on an object")
    if schema.get("type") == "array" and "items" not in schema:
        errors.append(f"{where}: array without items")
    for name, sub in schema.get("properties", {}).items():
        # House style for our own fields; Kubernetes' embedded pod schema (generated
        # into spec.template / spec.podTemplate) keeps Kubernetes' names, e.g.
        # dataSourceRef.namespace.
        if not path.startswith((".spec.template", ".spec.podTemplate")) and (
                name in CEL_RESERVED or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name)):
            errors.append(f"{where}.{name}: name needs CEL escaping; keep names plain camelCase")
        errors.extend(structural_errors(sub, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        errors.extend(structural_errors(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        errors.extend(structural_errors(schema["additionalProperties"], f"{path}{{}}"))
    for rule in schema.get("x-kubernetes-validations", []):
        if not rule.get("message"):
            errors.append(f"{where}: CEL rule {rule.get('rule')!r} has no message")
    return errors


def iter_nodes(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from iter_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from iter_nodes(schema["items"], f"{path}[]")


# ---------------------------------------------------------------------------
# Defaulting, OpenAPI validation, CEL.


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Fill in defaults the way the API server does: missing properties that
    have a default get it (and the default is defaulted in turn), recursively
    into objects and array items that are present."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, sub in schema["properties"].items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(sub, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def to_jsonschema(schema: Schema) -> Schema:
    """Translate an OpenAPI v3 CRD schema into plain JSON Schema.

    Kubernetes extensions are dropped, and objects that list their properties
    without preserving unknown fields refuse unknown ones (strict field
    validation, as ``kubectl apply`` does by default).
    """
    out: Schema = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("default", "description", "format"):
            continue
        if key == "properties":
            out[key] = {name: to_jsonschema(sub) for name, sub in value.items()}
        elif (key == "items" and isinstance(value, dict)) or (
            key == "additionalProperties" and isinstance(value, dict)
        ):
            out[key] = to_jsonschema(value)
        else:
            out[key] = value
    if schema.get("format") == "date-time":
        out["format"] = "date-time"
    if (
        schema.get("type") == "object"
        and "properties" in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _format_checker() -> Any:
    """jsonschema's checker, with date-time always checked (as the API server does).

    Without the optional rfc3339-validator package jsonschema skips date-time
    silently, and a status with ``lastTransitionTime: yesterday`` would pass
    here and be refused by a real server.
    """
    import jsonschema

    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if not _RFC3339.match(value):
            raise ValueError(f"{value!r} is not RFC 3339")
        dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return True

    return checker


def openapi_errors(schema: Schema, obj: Any, *, resource: bool = True) -> list[str]:
    import jsonschema

    root = to_jsonschema(schema)
    if resource:
        # metadata is validated by the API server itself, not by the CRD schema.
        root["properties"]["metadata"] = {"type": "object"}
    validator = jsonschema.Draft7Validator(root, format_checker=_format_checker())
    return sorted(
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator.iter_errors(obj)
    )


def cel_errors(schema: Schema, obj: Any, old: Any = None) -> list[str]:
    """Evaluate every ``x-kubernetes-validations`` rule where its node has a value.

    Transition rules (those mentioning ``oldSelf``) only run when there is an
    old value at the same place, exactly as on the API server.
    """
    import celpy

    env = celpy.Environment()
    errors: list[str] = []

    def walk(node: Schema, value: Any, old_value: Any, path: str) -> None:
        if value is None:
            return
        for rule in node.get("x-kubernetes-validations", []):
            source = rule["rule"]
            activation = {"self": celpy.json_to_cel(value)}
            if "oldSelf" in source:
                if old_value is None:
                    continue
                activation["oldSelf"] = celpy.json_to_cel(old_value)
            program = env.program(env.compile(source))
            try:
                ok = program.evaluate(activation)
            except celpy.CELEvalError as exc:  # pragma: no cover - reported as a failure
                errors.append(f"{path or '<root>'}: rule {source!r} errored: {exc}")
                continue
            if isinstance(ok, celpy.CELEvalError) or not bool(ok):
                errors.append(f"{path or '<root>'}: {rule.get('message', source)}")
        if isinstance(value, dict):
            for name, sub in node.get("properties", {}).items():
                old_sub = old_value.get(name) if isinstance(old_value, dict) else None
                walk(sub, value.get(name), old_sub, f"{path}.{name}")
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, item in enumerate(value):
                walk(node["items"], item, None, f"{path}[{i}]")

    walk(schema, obj, old, "")
    return errors


def admit(
    crd: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """What the API server would store, and why it would refuse the object.

    Returns the defaulted object and the list of errors (empty = accepted).
    """
    schema = schema_of(crd)
    defaulted = apply_defaults(schema, obj)
    old_defaulted = apply_defaults(schema, old) if old is not None else None
    errors = openapi_errors(schema, defaulted)
    if not errors:
        errors = cel_errors(schema, defaulted, old_defaulted)
    return defaulted, errors


def resolve_json_path(schema: Schema, json_path: str) -> Schema | None:
    """The schema node a printer column's simple JSONPath points at, or None."""
    path = re.sub(r"\[\?\(.*?\)\]", "[]", json_path)
    node: Schema = schema
    for part in re.findall(r"\.([A-Za-z0-9]+)|(\[\])", path):
        name, index = part
        if index:
            node = node.get("items", {})
            if not node:
                return None
        else:
            props = node.get("properties", {})
            if name not in props:
                return None
            node = props[name]
    return node
