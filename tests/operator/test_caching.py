"""The informer-style cache: a late watch event never undoes a newer write."""

from __future__ import annotations

from typing import Any

from jobwarden.controller.kube.caching import ObjectCache


def pod(uid: str, version: str, *, owner: str = "pool", phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "resourceVersion": version,
                         "ownerReferences": [{"uid": owner}]},
            "status": {"phase": phase}}


def test_an_older_body_does_not_replace_a_newer_one_and_an_equal_one_is_no_change():
    cache = ObjectCache()
    assert cache.put(pod("a", "10", phase="Running"))
    assert not cache.put(pod("a", "9"))  # a late event of an older state
    assert not cache.put(pod("a", "10", phase="Running"))  # the event of our own write
    assert cache.get("a")["status"]["phase"] == "Running"
    assert cache.put(pod("a", "11", phase="Succeeded"))
    assert cache.get("a")["status"]["phase"] == "Succeeded"


def test_a_deleted_object_is_not_brought_back_by_a_late_event():
    cache = ObjectCache()
    cache.put(pod("a", "10"))
    cache.remove("a")
    assert not cache.put(pod("a", "10"))
    assert cache.get("a") is None


def test_a_list_of_one_owner_drops_its_phantoms_and_keeps_other_owners():
    cache = ObjectCache()
    cache.put(pod("a", "1"))
    cache.put(pod("b", "2"))
    cache.put(pod("c", "3", owner="other"))
    cache.replace_owned("pool", [pod("a", "4", phase="Running")])
    assert [p["metadata"]["uid"] for p in cache.owned_by("pool")] == ["a"]
    assert cache.get("a")["status"]["phase"] == "Running"
    assert cache.get("c") is not None


def test_bodies_are_copies():
    cache = ObjectCache()
    body = pod("a", "1")
    cache.put(body)
    body["status"]["phase"] = "Changed"
    got = cache.get("a")
    got["status"]["phase"] = "Changed too"
    assert cache.get("a")["status"]["phase"] == "Pending"


def test_a_staged_status_is_read_over_newer_bodies_until_the_write_carrying_it_is_answered():
    cache = ObjectCache()
    cache.put(pod("a", "10", phase="Pending"))
    first = cache.stage_status("a", {"phase": "Running", "counts": {"ok": 1, "failed": 0}})
    later = cache.stage_status("a", {"counts": {"ok": 2}, "lastPod": "p"})
    assert cache.get("a")["status"] == {"phase": "Running", "counts": {"ok": 2, "failed": 0},
                                        "lastPod": "p"}
    # The watch delivers a newer body without it (another change): still read over it.
    cache.put(pod("a", "11", phase="Pending"))
    assert cache.get("a")["status"]["phase"] == "Running"
    assert cache.project(lambda b: b["status"]["lastPod"]) == {"a": "p"}
    # The first write answered: what was staged after it is still read.
    cache.put(pod("a", "12", phase="Running"))
    cache.written("a", first)
    assert cache.get("a")["status"]["lastPod"] == "p"
    cache.put({**pod("a", "13", phase="Running"),
               "status": {"phase": "Running", "counts": {"ok": 2, "failed": 0}}})
    cache.written("a", later)
    # Both written: the server's body as it is (not what was staged).
    assert cache.get("a")["status"] == {"phase": "Running", "counts": {"ok": 2, "failed": 0}}


def test_a_staged_status_is_a_merge_patch_and_nothing_is_staged_for_an_unknown_object():
    cache = ObjectCache()
    cache.put({**pod("a", "1"), "status": {"phase": "Running", "counts": {"ok": 1}}})
    assert cache.stage_status("gone", {"phase": "Failed"}) == 0  # nothing cached, nothing staged
    cache.stage_status("a", {"phase": None, "counts": {"failed": 1}})
    assert cache.get("a")["status"] == {"counts": {"ok": 1, "failed": 1}}
