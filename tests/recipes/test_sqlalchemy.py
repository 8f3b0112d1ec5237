"""Recipe (docs/recipes.md): enqueue inside a SQLAlchemy session's transaction."""

from __future__ import annotations

from typing import Any

import psycopg.conninfo
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

import jobwarden
from tests.support import testjobs


class Rollback(Exception):
    pass


def url(dsn: str, driver: str = "psycopg") -> sqlalchemy.URL:
    parts: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(dsn)
    return sqlalchemy.URL.create(f"postgresql+{driver}", username=parts.get("user"),
                                 password=parts.get("password"), host=parts.get("host"),
                                 port=int(parts["port"]) if "port" in parts else None,
                                 database=parts.get("dbname"))


def test_a_job_commits_and_rolls_back_with_the_session(client: jobwarden.Client,
                                                        dsn: str) -> None:
    engine = sqlalchemy.create_engine(url(dsn))
    try:
        with Session(engine) as session, session.begin():
            session.execute(sqlalchemy.text("CREATE TABLE orders (id int PRIMARY KEY)"))
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (1)"))
            kept = client.enqueue(testjobs.Record, {"order": 1}, conn=session)
        with pytest.raises(Rollback), Session(engine) as session, session.begin():
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (2)"))
            dropped = client.enqueue(testjobs.Record, {"order": 2}, conn=session)
            raise Rollback
        with engine.connect() as conn, conn.begin():  # a Connection works the same way
            also = client.enqueue(testjobs.Record, {"order": 3}, conn=conn)
    finally:
        engine.dispose()
    assert client.job(kept.id).data == {"order": 1}
    assert client.job(also.id).data == {"order": 3}
    with pytest.raises(jobwarden.JobNotFound):
        client.job(dropped.id)


@pytest.mark.asyncio
async def test_an_async_session_passes_its_connection(dsn: str) -> None:
    engine = create_async_engine(url(dsn))
    try:
        async with jobwarden.AsyncClient(dsn) as client:
            from sqlalchemy.ext.asyncio import AsyncSession

            async with AsyncSession(engine) as session, session.begin():
                conn = await session.connection()
                enqueued = await client.enqueue(testjobs.Record, {"order": 4}, conn=conn)
                assert await client.jobs() == []  # not committed yet
            assert (await client.job(enqueued.id)).data == {"order": 4}
    finally:
        await engine.dispose()
