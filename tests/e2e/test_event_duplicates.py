"""One Event per transition (issue 27: `SecretNotFound` x2 and `RolloutStarted` x2 in the
same second on a real control plane).

Why they were doubled: a kopf change handler and the resync loop both ran the same
pass from the same ``.status``. kopf applies a handler's status patch after the
handler returns, while the resync loop reads the object from the watch-fed cache,
which learns of that patch only when its watch event arrives; a pool's new pods
nudge the loop at once, so its pass, from the status before the handler's patch,
saw the same transition again and posted the same Event.
"""

from __future__ import annotations

import collections

from tests.e2e.conftest import NAMESPACE, Cluster


def reasons(cluster: Cluster, involved: str) -> collections.Counter[str]:
    return collections.Counter(str(e["reason"])
                               for e in cluster.api.events(NAMESPACE, involved=involved))


def passes(cluster: Cluster) -> float:
    return sum(cluster.operator.metric("jobwarden_operator_reconciles_total",
                                       kind="WorkerPool", result=result) or 0.0
               for result in ("unchanged", "updated"))


def test_a_missing_secret_and_a_rollout_are_each_one_event(cluster: Cluster) -> None:
    cluster.apply_pool("nosecret", replicas=2, dsnSecretRef={"name": "nosuch"})
    cluster.wait(lambda: reasons(cluster, "nosecret")["SecretNotFound"] >= 1, timeout=60,
                 what="the SecretNotFound event")
    cluster.apply_pool("workers", replicas=2)
    cluster.wait(lambda: cluster.settled(replicas=2, version="1"), timeout=120,
                 what="two ready pods")
    cluster.patch_pool("workers", {"image": "example/jobs:2"})
    cluster.wait(lambda: cluster.settled(replicas=2, version="2"), timeout=150,
                 what="the rollout to complete")
    done = passes(cluster)
    cluster.wait(lambda: passes(cluster) >= done + 10, timeout=60, what="ten more pool passes")
    assert reasons(cluster, "nosecret")["SecretNotFound"] == 1, reasons(cluster, "nosecret")
    counted = reasons(cluster, "workers")
    assert counted["RolloutStarted"] == 1, counted
    assert counted["RolloutComplete"] == 1, counted
