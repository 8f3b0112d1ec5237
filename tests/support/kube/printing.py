"""Server-side printing: the ``meta.k8s.io/v1`` Table that ``kubectl get`` asks for.

kubectl renders ``kubectl get`` columns from a Table the server builds, not
from the objects. For custom resources the server evaluates the CRD's
``additionalPrinterColumns`` (a JSONPath subset) and renders ``date`` columns
as ages ("5m", or "<invalid>" for a time in the future, as the real server
does). kmock has no tables, so ``kubectl get js`` would show names only; this
module makes it show what a user sees on a real cluster.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace.",
}
AGE_COLUMN = {
    "name": "Age",
    "type": "date",
    "format": "",
    "priority": 0,
    "jsonPath": ".metadata.creationTimestamp",
    "description": "CreationTimestamp is the server time when this object was created.",
}

_BUILTIN_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("", "pods"): [
        {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName", "priority": 1},
    ],
    ("", "namespaces"): [{"name": "Status", "type": "string", "jsonPath": ".status.phase"}],
    ("", "events"): [
        {"name": "Type", "type": "string", "jsonPath": ".type"},
        {"name": "Reason", "type": "string", "jsonPath": ".reason"},
        {"name": "Object", "type": "string", "jsonPath": ".involvedObject.name"},
        {"name": "Message", "type": "string", "jsonPath": ".message"},
    ],
    ("", "secrets"): [{"name": "Type", "type": "string", "jsonPath": ".type"}],
}


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``, digit for digit."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


_TOKEN_RE = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-]+)"""
    r"""|\[(?P<index>-?\d+|\*)\]"""
    r"""|\[\?\(@\.(?P<fpath>[A-Za-z0-9_.\-]+)\s*==\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')\)\]"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """The JSONPath subset printer columns use: fields, indexes, ``[*]`` and ``[?(@.a=="b")]``."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    path = path.removeprefix("$")
    values: list[Any] = [obj]
    position = 0
    while position < len(path):
        match = _TOKEN_RE.match(path, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath: {path!r}")
        position = match.end()
        found: list[Any] = []
        for value in values:
            if match["field"] is not None:
                if isinstance(value, Mapping) and match["field"] in value:
                    found.append(value[match["field"]])
            elif match["index"] is not None and isinstance(value, list):
                if match["index"] == "*":
                    found.extend(value)
                elif -len(value) <= int(match["index"]) < len(value):
                    found.append(value[int(match["index"])])
            elif match["fpath"] is not None and isinstance(value, list):
                wanted = match["dq"] if match["dq"] is not None else match["sq"]
                for item in value:
                    got = jsonpath(item, "." + match["fpath"])
                    if got and str(got[0]) == wanted:
                        found.append(item)
        values = found
    return values


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any], now: datetime.datetime) -> Any:
    try:
        values = jsonpath(obj, column["jsonPath"])
    except ValueError:
        return None
    if not values or values[0] is None:
        return None
    value = values[0]
    if column.get("type") == "date":
        try:
            return human_duration((now - parse_time(str(value))).total_seconds())
        except ValueError:
            return None
    if isinstance(value, Mapping | list):
        return str(value)
    return value


def columns_for(
    group: str, plural: str, printer_columns: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """The columns of a resource: the CRD's own, or a few well-known built-in ones, then Age."""
    if printer_columns is not None:
        columns = [dict(c) for c in printer_columns] or [dict(AGE_COLUMN)]
    else:
        columns = [dict(c) for c in _BUILTIN_COLUMNS.get((group, plural), [])] + [dict(AGE_COLUMN)]
    for column in columns:
        column.setdefault("priority", 0)
        column.setdefault("format", "")
        column.setdefault("description", column.get("jsonPath", ""))
    return columns


def table(
    objects: Sequence[Mapping[str, Any]],
    *,
    columns: Sequence[Mapping[str, Any]],
    resource_version: str,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    now = datetime.datetime.now(tz=datetime.UTC)
    definitions = [NAME_COLUMN] + [
        {k: c[k] for k in ("name", "type", "format", "description", "priority")} for c in columns
    ]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [obj.get("metadata", {}).get("name")] + [_cell(obj, c, now) for c in columns],
        }
        if include_object == "Object":
            row["object"] = dict(obj)
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
