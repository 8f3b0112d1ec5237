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


def test_an_amended_status_stays_over_newer_bodies_until_it_lands():
    """A kopf handler's status patch is applied to the cached body at once (the resync
    loop must not decide the same transition again), and over the newer bodies the
    watch delivers before it lands (kopf may write the annotations first); the body
    that shows it, or the operator's own later status write, ends the amendment."""
    cache = ObjectCache()
    body = {"metadata": {"uid": "u", "resourceVersion": "5"}, "status": {"a": 1, "b": 2}}
    cache.put(body)
    cache.amend_status("u", {"a": 3, "b": None, "c": [1]})
    assert cache.get("u")["status"] == {"a": 3, "c": [1]}
    annotated = {"metadata": {"uid": "u", "resourceVersion": "6"}, "status": {"a": 1, "b": 2}}
    assert cache.put(annotated)
    assert cache.get("u")["status"] == {"a": 3, "c": [1]}
    landed = {"metadata": {"uid": "u", "resourceVersion": "7"}, "status": {"a": 3, "c": [1]}}
    assert cache.put(landed)
    later = {"metadata": {"uid": "u", "resourceVersion": "8"}, "status": {"a": 4}}
    assert cache.put(later)
    assert cache.get("u")["status"] == {"a": 4}  # the amendment is over

    cache.amend_status("u", {"a": 5})
    ours = {"metadata": {"uid": "u", "resourceVersion": "9"}, "status": {"a": 6}}
    assert cache.put(ours, written=True)
    assert cache.get("u")["status"] == {"a": 6}
