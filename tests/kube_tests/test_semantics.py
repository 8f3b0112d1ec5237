"""The API rules kopf and the operator rely on, via the emulator and the Python client."""

from __future__ import annotations

import collections.abc
import threading
from typing import Any

import kmock
import kubernetes.client
import kubernetes.config
import kubernetes.watch
import pytest

from tests.support.kube import KubeAPI

GROUP, VERSION = "kube-tests.jobwarden.io", "v1alpha1"


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def client(kube_api: KubeAPI) -> collections.abc.Iterator[kubernetes.client.ApiClient]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(kube_api.kubeconfig))
    yield api_client
    api_client.close()


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def test_generation_changes_with_spec_only(kube_api: KubeAPI) -> None:
    created = kube_api.create(widget("w", size=1))
    assert created["metadata"]["generation"] == 1
    assert kube_api.patch("widgets", "w", {"spec": {"size": 2}})["metadata"]["generation"] == 2
    assert (
        kube_api.patch("widgets", "w", {"status": {"phase": "x"}}, subresource="status")[
            "metadata"
        ]["generation"]
        == 2
    )
    assert (
        kube_api.patch("widgets", "w", {"metadata": {"labels": {"a": "b"}}})["metadata"][
            "generation"
        ]
        == 2
    )


def test_generation_counts_status_when_it_is_not_a_subresource(kube_api: KubeAPI) -> None:
    kube_api.create(
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Gadget", "metadata": {"name": "g"}}
    )
    patched = kube_api.patch("gadgets", "g", {"status": {"phase": "x"}})
    assert patched["status"] == {"phase": "x"}
    assert patched["metadata"]["generation"] == 2


def test_resource_version_grows_on_every_write_and_not_on_a_no_op(kube_api: KubeAPI) -> None:
    first = kube_api.create(widget("w", size=1))
    second = kube_api.patch("widgets", "w", {"metadata": {"annotations": {"x": "1"}}})
    third = kube_api.patch("widgets", "w", {"status": {"phase": "p"}}, subresource="status")
    assert rv(first) < rv(second) < rv(third)
    assert rv(kube_api.patch("widgets", "w", {"spec": {"size": 1}})) == rv(third)  # nothing changed


def test_list_carries_kind_and_the_latest_resource_version(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    kube_api.create(widget("w1"))
    last = kube_api.create(widget("w2"))
    listed = kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object(
        GROUP, VERSION, "default", "widgets"
    )
    assert listed["kind"] == "WidgetList" and listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert int(listed["metadata"]["resourceVersion"]) >= rv(last)
    assert [item["kind"] for item in listed["items"]] == ["Widget", "Widget"]


def test_main_resource_writes_ignore_status_and_status_writes_ignore_the_rest(
    kube_api: KubeAPI,
) -> None:
    kube_api.create(widget("w", size=1))
    kube_api.patch("widgets", "w", {"spec": {"size": 2}, "status": {"phase": "sneaky"}})
    kube_api.patch(
        "widgets", "w", {"spec": {"size": 3}, "status": {"phase": "real"}}, subresource="status"
    )
    stored = kube_api.get("widgets", "w")
    assert stored is not None
    assert stored["spec"]["size"] == 2
    assert stored["status"] == {"phase": "real"}


def test_stale_resource_version_conflicts(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    created = kube_api.create(widget("w", size=1))
    kube_api.patch("widgets", "w", {"spec": {"size": 2}})
    created["spec"]["size"] = 5
    api = kubernetes.client.CustomObjectsApi(client)
    with pytest.raises(kubernetes.client.ApiException) as failure:
        api.replace_namespaced_custom_object(GROUP, VERSION, "default", "widgets", "w", created)
    assert failure.value.status == 409


def test_label_and_field_selectors(kube_api: KubeAPI, client: kubernetes.client.ApiClient) -> None:
    kube_api.create(
        {**widget("a"), "metadata": {"name": "a", "labels": {"tier": "web", "env": "prod"}}}
    )
    kube_api.create(
        {**widget("b"), "metadata": {"name": "b", "labels": {"tier": "db", "env": "prod"}}}
    )
    kube_api.create({**widget("c"), "metadata": {"name": "c", "labels": {"tier": "web"}}})
    api = kubernetes.client.CustomObjectsApi(client)

    def names(**kwargs: str) -> list[str]:
        items = api.list_cluster_custom_object(GROUP, VERSION, "widgets", **kwargs)["items"]
        return sorted(item["metadata"]["name"] for item in items)

    assert names(label_selector="tier=web,env=prod") == ["a"]
    assert names(label_selector="tier notin (db),!env") == ["c"]
    assert names(label_selector="tier!=web") == ["b"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.namespace=default,metadata.name!=a") == ["b", "c"]


def test_watch_streams_added_modified_deleted_and_resumes(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.CustomObjectsApi(client)
    start = kube_api.create(widget("before"))
    kube_api.create(widget("w", size=1))
    kube_api.patch("widgets", "w", {"spec": {"size": 2}})
    kube_api.delete("widgets", "w")
    stream = kubernetes.watch.Watch().stream(
        api.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        "widgets",
        resource_version=start["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )
    seen = [(event["type"], event["object"]["metadata"]["name"]) for event in stream]
    assert seen == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]  # nothing before the resumed version


def test_watch_sees_live_changes_after_the_initial_state(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.CoreV1Api(client)
    kube_api.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old"}, "spec": {"containers": []}}
    )
    events: list[tuple[str, str]] = []
    watching = threading.Event()

    def watch() -> None:
        for event in kubernetes.watch.Watch().stream(
            api.list_namespaced_pod, "default", timeout_seconds=3
        ):
            events.append((event["type"], event["object"].metadata.name))
            watching.set()
            if event["type"] == "DELETED":
                return

    thread = threading.Thread(target=watch)
    thread.start()
    assert watching.wait(5)
    api.create_namespaced_pod("default", {"metadata": {"name": "new"}, "spec": {"containers": []}})
    api.patch_namespaced_pod(
        "new", "default", {"metadata": {"labels": {"x": "y"}}}
    )  # a strategic merge patch
    api.delete_namespaced_pod("new", "default")
    thread.join(5)
    assert events == [("ADDED", "old"), ("ADDED", "new"), ("MODIFIED", "new"), ("DELETED", "new")]


def test_watch_ends_at_timeout_seconds(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.CoreV1Api(client)
    events = list(
        kubernetes.watch.Watch().stream(api.list_namespaced_pod, "default", timeout_seconds=1)
    )
    assert events == []


def test_finalizers_hold_deletion_until_removed(kube_api: KubeAPI) -> None:
    kube_api.create({**widget("w"), "metadata": {"name": "w", "finalizers": ["example.com/hold"]}})
    terminating = kube_api.delete("widgets", "w")
    assert terminating["metadata"]["deletionTimestamp"]
    stored = kube_api.get("widgets", "w")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]
    with pytest.raises(Exception, match="no new finalizers"):
        kube_api.patch(
            "widgets", "w", {"metadata": {"finalizers": ["example.com/hold", "another"]}}
        )
    kube_api.patch("widgets", "w", {"metadata": {"finalizers": None}})
    assert kube_api.get("widgets", "w") is None


def test_owned_pods_are_garbage_collected_after_their_owner(kube_api: KubeAPI) -> None:
    owner = kube_api.create(widget("owner"))
    other = kube_api.create(widget("other"))

    def ref(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
        }

    for name, owners in (("only-owned", [ref(owner)]), ("co-owned", [ref(owner), ref(other)])):
        kube_api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "ownerReferences": owners},
                "spec": {"containers": []},
            }
        )
    kube_api.delete("widgets", "owner")
    kube_api.wait_gone("pods", "only-owned")
    survivor = kube_api.wait_for(
        "pods", "co-owned", condition=lambda pod: len(pod["metadata"]["ownerReferences"]) == 1
    )
    assert survivor["metadata"]["ownerReferences"][0]["uid"] == other["metadata"]["uid"]


def test_orphan_propagation_keeps_dependents(kube_api: KubeAPI) -> None:
    owner = kube_api.create(widget("owner"))
    kube_api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": {"containers": []},
            "metadata": {
                "name": "p",
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": "Widget",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            },
        }
    )
    kube_api.delete("widgets", "owner", propagation="Orphan")
    pod = kube_api.get("pods", "p")
    assert pod is not None and "ownerReferences" not in pod["metadata"]


def test_namespaces_must_exist_and_take_their_content_along(kube_api: KubeAPI) -> None:
    with pytest.raises(Exception, match='namespaces "team" not found'):
        kube_api.create(widget("w"), namespace="team")
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    kube_api.create(widget("w"), namespace="team")
    kube_api.delete("namespaces", "team", namespace=None)
    kube_api.wait_gone("namespaces", "team", namespace=None)
    assert kube_api.get("widgets", "w", "team") is None


def test_events_and_secrets_are_plain_namespaced_resources(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.CoreV1Api(client)
    api.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    api.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "w."},
            "reason": "Tested",
            "involvedObject": {"kind": "Widget", "name": "w"},
        },
    )
    assert api.read_namespaced_secret("s", "default").metadata.uid
    (event,) = kube_api.events("default", involved="w")
    assert event["reason"] == "Tested" and event["metadata"]["name"].startswith("w.")


def test_kmock_reactions_still_take_precedence(
    kube_api: KubeAPI, client: kubernetes.client.ApiClient
) -> None:
    kube_api.emulator["list", kmock.resource(GROUP, VERSION, "widgets")] << 503
    with pytest.raises(kubernetes.client.ApiException) as failure:
        kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object(
            GROUP, VERSION, "default", "widgets"
        )
    assert failure.value.status == 503


def test_a_watch_timeout_must_be_an_integer_as_on_kube_apiserver(kube_api: KubeAPI) -> None:
    import urllib.error
    import urllib.request

    url = f"{kube_api.url}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=300.0"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=10)
    assert caught.value.code == 400
    assert "strconv.ParseInt" in caught.value.read().decode()
