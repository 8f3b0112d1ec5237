"""podrunning.py's pure parts: history limits, the pods in status, the claim a pod carries."""

from __future__ import annotations

from typing import Any

from jobwarden.controller import podrunning, runpods


def pod(name: str, phase: str, created: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "status": {"phase": phase}}


PODS = [
    pod("a", "Succeeded", "2026-11-30T01:00:00Z"),
    pod("b", "Failed", "2026-11-30T02:00:00Z"),
    pod("c", "Succeeded", "2026-11-30T03:00:00Z"),
    pod("d", "Failed", "2026-11-30T04:00:00Z"),
    pod("e", "Succeeded", "2026-11-30T05:00:00Z"),
    pod("f", "Running", "2026-11-30T06:00:00Z"),
    pod("g", "Pending", "2026-11-30T07:00:00Z"),
]


def test_history_limits_delete_the_oldest_finished_pods_beyond_them() -> None:
    assert podrunning.history_victims(PODS, successful=1, failed=1) == ["a", "c", "b"]
    assert podrunning.history_victims(PODS, successful=0, failed=None) == ["a", "c", "e"]
    assert podrunning.history_victims(PODS, successful=None, failed=None) == []
    assert podrunning.history_victims(PODS, successful=5, failed=5) == []


def test_a_running_or_terminating_pod_is_never_pruned() -> None:
    pods = [*PODS, pod("old", "Succeeded", "2026-11-29T00:00:00Z", deleting=True)]
    victims = podrunning.history_victims(pods, successful=0, failed=0)
    assert "f" not in victims and "g" not in victims and "old" not in victims


def test_status_names_the_active_pods_and_the_newest_one() -> None:
    assert podrunning.pods_status(PODS) == {"activePods": ["f", "g"], "lastPod": "g"}
    assert podrunning.pods_status([]) == {"activePods": [], "lastPod": None}
    many = [pod(f"p{i:02d}", "Running", f"2026-11-30T00:{i:02d}:00Z") for i in range(15)]
    shown = podrunning.pods_status(many)["activePods"]
    assert len(shown) == podrunning.ACTIVE_SHOWN and shown[-1] == "p14"


def test_only_changed_pod_fields_are_patched() -> None:
    previous = {"activePods": ["f"], "lastPod": "f", "phase": "Running"}
    assert podrunning.status_delta(previous, {"activePods": ["f"], "lastPod": "f"}) == {}
    assert podrunning.status_delta(previous, {"activePods": [], "lastPod": "f"}) == \
        {"activePods": []}
    assert podrunning.status_delta({}, {}) == {}


def test_the_claim_and_the_owner_are_read_back_from_the_pod() -> None:
    from jobwarden.controller import specs

    spec = specs.PodRunSpec(template={"spec": {"containers": [{"name": "job", "image": "i"}]}},
                            dsn_secret="s", dsn_key="dsn", start_deadline_seconds=60)
    owner = runpods.Owner(kind="ExclusiveJob", namespace="n", name="m", uid="u-1")
    manifest = runpods.pod_manifest(spec, owner=owner, run=runpods.Run(
        job_id=7, attempt=2, claim_token="tok"), claimed_at=12.5)
    assert podrunning.claim_token_of(manifest) == "tok"
    assert podrunning.claimed_at(manifest) == 12.5
    assert podrunning.owner_of(manifest) == owner
    assert podrunning.owner_of({"metadata": {"ownerReferences": [{"kind": "WorkerPool"}]}}) \
        is None
