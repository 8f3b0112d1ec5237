"""A tiny kopf operator against the emulated API: proof that kopf's needs are met.

The operator reacts to a Widget by creating a pod it owns and reporting in
status; deleting the Widget runs its delete handler through kopf's finalizer,
and the garbage collector takes the pod. kopf also posts Events for handlers.
"""

from __future__ import annotations

import asyncio
import collections.abc
import threading
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
import pytest

from tests.support.kube import KubeAPI, Kubectl

WIDGET = """
apiVersion: kube-tests.jobwarden.io/v1alpha1
kind: Widget
metadata: {name: w1}
spec: {size: 2}
"""


@pytest.fixture
def operator(kube_api: KubeAPI) -> collections.abc.Iterator[list[str]]:
    """Run the operator in a thread during the test; yields the names of deleted widgets."""
    registry = kopf.OperatorRegistry()
    deleted: list[str] = []
    core = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(kube_api.kubeconfig))
    )

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=kube_api.url, token="kmock-test-token")

    @kopf.on.create("kube-tests.jobwarden.io", "v1alpha1", "widgets", registry=registry)
    def created(
        body: kopf.Body, spec: kopf.Spec, name: str, namespace: str, patch: kopf.Patch, **_: Any
    ) -> None:
        pod: dict[str, Any] = {
            "metadata": {"name": f"{name}-worker", "labels": {"widget": name}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        kopf.adopt(pod, owner=body)
        core.create_namespaced_pod(namespace, pod)
        kopf.info(body, reason="WorkerCreated", message=f"created pod {pod['metadata']['name']}")
        patch.status["phase"] = "Ready"
        patch.status["pods"] = len(
            core.list_namespaced_pod(namespace, label_selector=f"widget={name}").items
        )

    @kopf.on.delete("kube-tests.jobwarden.io", "v1alpha1", "widgets", registry=registry)
    def removed(name: str, **_: Any) -> None:
        deleted.append(name)

    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(
            kopf.operator(
                registry=registry,
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
                ready_flag=ready,
            )
        )
    )
    thread.start()
    assert ready.wait(10), "the operator did not start"
    yield deleted
    stop.set()
    thread.join(10)
    assert not thread.is_alive(), "the operator did not stop"


def test_kopf_operator_reconciles_through_status_finalizers_events_and_pods(
    kube_api: KubeAPI,
    kubectl: Kubectl,
    operator: list[str],
) -> None:
    kubectl.apply(WIDGET)
    widget = kube_api.wait_for(
        "widgets", "w1", condition=lambda w: w.get("status", {}).get("phase") == "Ready"
    )
    assert widget["status"]["pods"] == 1
    assert widget["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
    pod = kube_api.get("pods", "w1-worker")
    assert (
        pod is not None
        and pod["metadata"]["ownerReferences"][0]["uid"] == widget["metadata"]["uid"]
    )
    events = kube_api.wait(lambda: kube_api.events("default", involved="w1"), what="kopf's events")
    assert [(event["reason"], event["message"]) for event in events] == [
        ("WorkerCreated", "created pod w1-worker")
    ]

    kubectl("delete", "widget", "w1")  # waits until kopf has removed its finalizer
    assert operator == ["w1"]
    assert kube_api.get("widgets", "w1") is None
    kube_api.wait_gone("pods", "w1-worker")
