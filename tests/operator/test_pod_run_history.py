"""controller/podruns/reconciler.py's pure parts: history limits, the pods in status,
the claim a pod carries."""

from __future__ import annotations

from typing import Any

from jobwarden.controller.podruns import pods as runpods
from jobwarden.controller.podruns import reconciler as podruns


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
    assert podruns.history_victims(PODS, successful=1, failed=1) == ["a", "c", "b"]
    assert podruns.history_victims(PODS, successful=0, failed=None) == ["a", "c", "e"]
    assert podruns.history_victims(PODS, successful=None, failed=None) == []
    assert podruns.history_victims(PODS, successful=5, failed=5) == []


def test_a_running_or_terminating_pod_is_never_pruned() -> None:
    pods = [*PODS, pod("old", "Succeeded", "2026-11-29T00:00:00Z", deleting=True)]
    victims = podruns.history_victims(pods, successful=0, failed=0)
    assert "f" not in victims and "g" not in victims and "old" not in victims


def test_status_names_the_active_pods_and_the_newest_one() -> None:
    assert podruns.pods_status(PODS) == {"activePods": ["f", "g"], "lastPod": "g"}
    assert podruns.pods_status([]) == {"activePods": [], "lastPod": None}
    many = [pod(f"p{i:02d}", "Running", f"2026-11-30T00:{i:02d}:00Z") for i in range(15)]
    shown = podruns.pods_status(many)["activePods"]
    assert len(shown) == podruns.ACTIVE_SHOWN and shown[-1] == "p14"


def test_only_changed_pod_fields_are_patched() -> None:
    previous = {"activePods": ["f"], "lastPod": "f", "phase": "Running"}
    assert podruns.status_delta(previous, {"activePods": ["f"], "lastPod": "f"}) == {}
    assert podruns.status_delta(previous, {"activePods": [], "lastPod": "f"}) == \
        {"activePods": []}
    assert podruns.status_delta({}, {}) == {}


def test_the_claim_and_the_owner_are_read_back_from_the_pod() -> None:
    from jobwarden.controller import specs

    spec = specs.PodRunSpec(template={"spec": {"containers": [{"name": "job", "image": "i"}]}},
                            dsn_secret="s", dsn_key="dsn", start_deadline_seconds=60)
    owner = runpods.Owner(kind="ExclusiveJob", namespace="n", name="m", uid="u-1")
    manifest = runpods.pod_manifest(spec, owner=owner, run=runpods.Run(
        job_id=7, attempt=2, claim_token="tok"), claimed_at=12.5)
    assert podruns.claim_token_of(manifest) == "tok"
    assert podruns.claimed_at(manifest) == 12.5
    assert podruns.owner_of(manifest) == owner
    assert podruns.owner_of({"metadata": {"ownerReferences": [{"kind": "WorkerPool"}]}}) \
        is None


def _row(job_id: int, *, claimed_by: str = "pod-runs:east", started: bool = False,
         cancel: bool = False, age: float = 5.0, attempt: int = 1) -> Any:
    import datetime as dt

    from jobwarden.structs.podruns import RunningPodRun

    now = dt.datetime(2026, 11, 30, 7, 0, tzinfo=dt.UTC)
    return RunningPodRun(job_id=job_id, pod_run="ExclusiveJob/n/m", claim_token=f"t{job_id}",
                         attempt=attempt, schedule_name=None, slot=None,
                         cancel_requested=cancel, claimed_at=now - dt.timedelta(seconds=age),
                         heartbeat_at=now if started else None, claim_expires_at=None,
                         claimed_by=claimed_by, lease_token=40 + job_id)


def test_only_this_clusters_unstarted_claims_within_their_deadline_get_a_new_pod() -> None:
    import datetime as dt

    now = dt.datetime(2026, 11, 30, 7, 0, tzinfo=dt.UTC).timestamp()
    rows = [_row(1), _row(2, claimed_by="pod-runs:west"), _row(3, started=True),
            _row(4, cancel=True), _row(5, age=61.0), _row(6), _row(7), _row(8, attempt=2)]
    found = podruns.orphaned_claims(rows, have={(6, 1), (8, 1)}, claimant="pod-runs:east",
                                       now=now, deadline=60.0, skip={7})
    # 2: another cluster's; 3: run-job started; 4: cancelled; 5: past its start deadline;
    # 6: its pod exists; 7: claimed in this pass; 8: the pod of an earlier attempt only.
    assert [r.job_id for r in found] == [1, 8]
    run = podruns.run_of_row(found[0])
    assert (run.job_id, run.attempt, run.claim_token, run.lease_token) == (1, 1, "t1", 41)
