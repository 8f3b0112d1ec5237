"""The operator embedded in a thread (no subprocess): started, reconciling, stopped."""

from __future__ import annotations

import threading
from typing import Any

import kopf

from jobwarden.controller.app import Operator
from jobwarden.controller.config import OperatorConfig
from jobwarden.db.database import Database
from tests.support.kube import KubeAPI


def test_an_embedded_operator_reconciles_and_stops_on_request(kube_api: KubeAPI,
                                                              db: Database) -> None:
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=kube_api.url, token="kmock-test-token")

    operator = Operator(db, OperatorConfig(http_port=None, status_interval=0.3,
                                           pod_name="embedded"), login=login)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(operator.run()))
    thread.start()
    try:
        assert operator.runtime.health.kopf_ready.wait(20), "kopf did not become ready"
        assert operator.ready() == (True, "ok") and operator.healthy() == (True, "ok")
        kube_api.create({"apiVersion": "jobwarden.io/v1alpha1", "kind": "ExclusiveJob",
                         "metadata": {"name": "x", "namespace": "default"},
                         "spec": {"job": {"class": "a.b:C"}}})
        kube_api.wait_for("xj", "x", timeout=20,
                          condition=lambda o: o.get("status", {}).get("phase") == "Pending")
    finally:
        operator.stop()
        thread.join(20)
    assert not thread.is_alive() and result == [0]
    assert db.leases.list(prefix="operator:") == []  # released on the way out
