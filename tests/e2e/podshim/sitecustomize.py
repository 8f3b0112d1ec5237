"""Cluster DNS and Service routing for the pods of the process kubelet (tests/e2e/clusterdns.py).

Loaded by every Python process the kubelet starts in node mode (this directory is first
on its ``PYTHONPATH``). A pod's process shares the host's network and resolver, so the
names a cluster's DNS would answer -- ``<service>``, ``<service>.<namespace>``,
``<service>.<namespace>.svc[.cluster.local]`` -- are answered here instead, from the
table the kubelet publishes (``PROCESS_KUBELET_SERVICES``): the Service's port maps to
the port a ready endpoint pod really listens on, on 127.0.0.1 (what CoreDNS plus
kube-proxy do on a node). Any other name goes to the real resolver.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

_real_getaddrinfo = socket.getaddrinfo
_TABLE = os.environ.get("PROCESS_KUBELET_SERVICES")
_NAMESPACE = os.environ.get("PROCESS_KUBELET_NAMESPACE", "default")


def _service_port(host: str, port: Any) -> int | None:
    name = host.rstrip(".").lower()
    for suffix in (".svc.cluster.local", ".svc"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    parts = name.split(".")
    if len(parts) > 2:
        return None
    key = name if len(parts) == 2 else f"{name}.{_NAMESPACE}"
    try:
        with open(str(_TABLE)) as handle:
            table = json.load(handle)
    except (OSError, ValueError):
        return None
    service = table.get(key)
    if service is None:
        return None
    local = service.get(str(port))
    if local is None:
        raise socket.gaierror(socket.EAI_SERVICE, f"service {key} has no port {port}")
    return int(local)


def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    if _TABLE and isinstance(host, str) and host and not host[0].isdigit() \
            and host != "localhost":
        local = _service_port(host, port)
        if local is not None:
            return _real_getaddrinfo("127.0.0.1", local, *args, **kwargs)
    return _real_getaddrinfo(host, port, *args, **kwargs)


socket.getaddrinfo = getaddrinfo
