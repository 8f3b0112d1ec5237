"""What kube-scheduler reports about a pod no node can take, for the real-cluster tier.

The tier runs no scheduler: each process kubelet binds the pods of its namespace
that fit its own node (nodeSelector, taints; tests/e2e/kubelet.py). A pod that
fits none of them would stay Pending without a word, where kube-scheduler writes
``PodScheduled=False`` with reason ``Unschedulable`` and posts a
``FailedScheduling`` Event -- the fields the operator reads to report a pod run's
``unschedulable`` cause. :class:`UnschedulableReporter` writes exactly those for
the pods of one namespace that none of the given nodes fits, and nothing else
(binding stays the kubelets'). Opt-in: a test that provokes unschedulable pods
starts it; the rest of the tier is unchanged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tests.e2e.kubelet import _tolerates, now_rfc3339


def misfit(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why ``node`` cannot take ``pod`` (kube-scheduler's filter message), or None."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _tolerates(t, taint) for t in tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value')}}}"
    return None


class UnschedulableReporter:
    """Marks the unbound pods of ``namespace`` that none of ``nodes()`` fits, once each."""

    def __init__(self, api: Any, namespace: str, nodes: Callable[[], list[str]], *,
                 interval: float = 0.3) -> None:
        self.api = api
        self.namespace = namespace
        self.nodes = nodes
        self.interval = interval
        self.reported: set[str] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="unschedulable", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._pass()
            except Exception as exc:  # the test sees it in errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def _pass(self) -> None:
        pods = [p for p in self.api.list("pods", self.namespace)
                if not (p.get("spec") or {}).get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and p["metadata"].get("uid") not in self.reported]
        if not pods:
            return
        nodes = [n for n in (self.api.get("nodes", name, None) for name in self.nodes()) if n]
        for pod in pods:
            reasons = [why for why in (misfit(pod, node) for node in nodes) if why]
            if len(reasons) < len(nodes):
                continue  # some node fits: its kubelet binds it
            self._report(pod, nodes, reasons)

    def _report(self, pod: dict[str, Any], nodes: list[dict[str, Any]],
                reasons: list[str]) -> None:
        meta = pod["metadata"]
        counted: dict[str, int] = {}
        for why in reasons:
            counted[why] = counted.get(why, 0) + 1
        detail = ", ".join(f"{n} {why}" for why, n in sorted(counted.items()))
        total = len(nodes)
        message = (f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes "
                   f"are available: {total} Preemption is not helpful for scheduling.")
        if not total:
            message = "no nodes available to schedule pods"
        stamp = now_rfc3339()
        self.api.patch("pods", meta["name"], {"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message, "lastProbeTime": None, "lastTransitionTime": stamp}]}},
            self.namespace, subresource="status")
        with contextlib.suppress(Exception):  # events are best effort, as the scheduler's
            self.api.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": self.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": self.namespace, "uid": meta.get("uid", "")},
                "reason": "FailedScheduling", "message": message, "type": "Warning",
                "source": {"component": "default-scheduler"},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}, self.namespace)
        self.reported.add(str(meta.get("uid")))

    @contextlib.contextmanager
    def running(self) -> Iterator[UnschedulableReporter]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)

