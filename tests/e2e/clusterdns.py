"""The process kubelet's stand-in for cluster DNS and kube-proxy: a table of Services.

Why a table and a resolver hook, not a DNS server: the pods are processes on this
machine, sharing its resolver (``/etc/resolv.conf``) and its loopback; a DNS server
could answer a name but not the port (every process listens on a free port that the
kubelet chose, not on its containerPort), and pointing the machine's resolver at a
test server would touch every other process. So each pass the kubelet writes, for
every Service of its pods' namespaces, which local port serves each Service port (a
ready pod on this node whose labels match the selector; ``targetPort`` by number or
name, as kube-proxy resolves it), and the pods' Python processes resolve Service
names through it (tests/e2e/podshim/sitecustomize.py). What this does not give: a
ClusterIP, load balancing over several endpoints (the first ready one serves), names
for non-Python processes, or Services in image mode (the image has its own Python).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

SHIM = Path(__file__).resolve().parent / "podshim"
TABLE_ENV = "PROCESS_KUBELET_SERVICES"
NAMESPACE_ENV = "PROCESS_KUBELET_NAMESPACE"


class Endpoint(Protocol):
    ready: bool
    ports: dict[str, int]


def table(services: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
          running: Mapping[str, Endpoint]) -> dict[str, dict[str, int]]:
    """``{"<service>.<namespace>": {"<service port>": <local port>}}`` for Services with
    a ready endpoint among ``running`` (the kubelet's processes, by pod name)."""
    out: dict[str, dict[str, int]] = {}
    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector:
            continue
        ready = [running[p["metadata"]["name"]] for p in pods
                 if p["metadata"].get("namespace") == meta.get("namespace")
                 and p["metadata"]["name"] in running
                 and running[p["metadata"]["name"]].ready
                 and selector.items() <= (p["metadata"].get("labels") or {}).items()]
        if not ready:
            continue
        ports: dict[str, int] = {}
        for port in spec.get("ports") or []:
            target = str(port.get("targetPort", port["port"]))
            local = ready[0].ports.get(target)
            if local is None and target.isdigit():
                local = int(target)
            if local is not None:
                ports[str(port["port"])] = local
        out[f"{meta['name']}.{meta.get('namespace')}"] = ports
    return out


def publish(path: Path, entries: dict[str, dict[str, int]]) -> None:
    """Replace the table at once (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(entries, sort_keys=True))
    os.replace(partial, path)
    path.chmod(0o644)
