"""The FastAPI recipe of docs/recipes.md, as a module the tests run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request

import jobwarden
from tests.support import testjobs


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One AsyncClient (one async pool) per process, opened and closed with the app.
    async with jobwarden.AsyncClient(os.environ["JOBWARDEN_DSN"]) as client:
        app.state.jobs = client
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/orders/{order_id}")
async def place_order(order_id: int, request: Request, fail: bool = False) -> dict[str, Any]:
    jobs: jobwarden.AsyncClient = request.app.state.jobs
    async with await psycopg.AsyncConnection.connect(os.environ["JOBWARDEN_DSN"]) as conn:
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO orders (id) VALUES (%s)", (order_id,))
                job = await jobs.enqueue(testjobs.add, {"a": order_id, "b": 1}, conn=conn,
                                         unique_key=f"order:{order_id}")
                if fail:
                    raise RuntimeError("payment declined")
        except RuntimeError as exc:
            raise HTTPException(status_code=402, detail=str(exc)) from exc
    return {"job": job.id}


@app.get("/jobs/{job_id}/result")
async def job_result(job_id: int, request: Request) -> dict[str, Any]:
    jobs: jobwarden.AsyncClient = request.app.state.jobs
    try:
        return {"result": await jobs.wait(job_id, timeout=30)}
    except jobwarden.JobNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
