"""Recipe (docs/recipes.md): FastAPI with AsyncClient in the lifespan."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from fastapi.testclient import TestClient

import jobwarden
from jobwarden.worker.worker import Worker
from tests.recipes import fastapiapp


def test_orders_enqueue_in_their_transaction_and_results_are_awaited(
        client: jobwarden.Client, dsn: str, monkeypatch: pytest.MonkeyPatch,
        start_worker: Callable[..., Worker]) -> None:
    monkeypatch.setenv("JOBWARDEN_DSN", dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    start_worker(apps=["tests.support.testjobs"])
    with TestClient(fastapiapp.app) as http:  # runs the lifespan: the pool opens and closes
        declined = http.post("/orders/1", params={"fail": True})
        assert declined.status_code == 402
        assert client.jobs() == []  # the order and its job rolled back together
        placed = http.post("/orders/2")
        assert placed.status_code == 200
        job_id = placed.json()["job"]
        assert http.get(f"/jobs/{job_id}/result").json() == {"result": 3}
        assert http.get("/jobs/999999/result").status_code == 404
