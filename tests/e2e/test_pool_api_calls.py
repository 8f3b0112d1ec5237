"""An idle WorkerPool costs (almost) no API calls: its pods come from the operator's watch.

The emulated API server records every request; the operator's own (everything
but its long-lived watch streams) are counted while the pool sits idle for 20
passes of its resync loop. Before the pod watch, every pass LISTed the pool's
pods and read its DSN Secret: 40 requests in 20 passes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import NAMESPACE, Cluster

pytestmark = pytest.mark.slow

PASSES = 20


def unchanged_passes(cluster: Cluster) -> float:
    return cluster.operator.metric("jobwarden_operator_reconciles_total", kind="WorkerPool",
                                   result="unchanged") or 0.0


def operator_calls(requests: list[Any]) -> list[str]:
    """The non-watch requests (kopf's watch streams stay open; they are not calls per pass)."""
    return [f"{r.method.value} {r.url.path}" for r in requests
            if str(r.params.get("watch", "")).lower() not in ("true", "1")]


def test_an_idle_pool_is_reconciled_from_the_pod_watch_not_by_listing(cluster: Cluster):
    cluster.apply_pool("workers", replicas=1)
    cluster.wait(lambda: cluster.settled("workers", replicas=1), timeout=90,
                 what="one ready pod")
    start = unchanged_passes(cluster)
    cluster.wait(lambda: unchanged_passes(cluster) >= start + 2, timeout=120,
                 what="the pool's passes settling")
    seen, first = len(cluster.api.requests), unchanged_passes(cluster)
    cluster.wait(lambda: unchanged_passes(cluster) >= first + PASSES, timeout=180,
                 what=f"{PASSES} idle passes")
    passes = unchanged_passes(cluster) - first
    calls = operator_calls(cluster.api.requests[seen:])
    pod_lists = [c for c in calls if c.endswith(f"/namespaces/{NAMESPACE}/pods")
                 and c.startswith("GET")]
    secret_reads = [c for c in calls if "/secrets/" in c]
    print(f"{passes:.0f} idle passes, {len(calls)} API calls: {calls}")
    # Every pass still ran (status mirror, drains), but read nothing from the API server:
    # the pod LIST is a correction every 5 minutes, the Secret is re-read once a minute.
    assert len(pod_lists) <= 1, calls
    assert len(secret_reads) <= 1, calls
    assert len(calls) <= 3, calls

    # The watch still drives the pool: a deleted pod is replaced without a LIST.
    victim = cluster.pods()[0]["metadata"]["name"]
    cluster.api.delete("pods", victim, NAMESPACE)
    cluster.wait(lambda: victim not in {p["metadata"]["name"] for p in cluster.pods(alive=False)}
                 and cluster.settled("workers", replicas=1), timeout=90,
                 what="the deleted pod replaced")
