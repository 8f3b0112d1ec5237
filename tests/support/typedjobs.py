"""Jobs with declared data types (dataclass, TypedDict, pydantic, annotated functions)."""

from __future__ import annotations

import dataclasses
from typing import Literal, TypedDict

import pydantic

import jobwarden


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int = 1


@dataclasses.dataclass
class Invoice:
    invoice_id: int
    currency: Literal["EUR", "USD"]
    lines: list[Line]
    note: str | None = None


class SendInvoice(jobwarden.Job):
    """Declares its type by annotation; returns what it received, to show it was typed."""

    def perform(self, data: Invoice) -> dict[str, object]:
        assert isinstance(data, Invoice), type(data)
        assert all(isinstance(line, Line) for line in data.lines)
        return {"type": type(data).__name__, "units": sum(x.quantity for x in data.lines)}


class Greeting(TypedDict):
    name: str
    times: int


class Greet(jobwarden.Job):
    data_type = Greeting

    def perform(self, data: Greeting) -> str:
        return " ".join([f"hello {data['name']}"] * data["times"])


class Signup(pydantic.BaseModel):
    email: str
    age: int = pydantic.Field(ge=0)


class Welcome(jobwarden.Job):
    async def perform(self, data: Signup) -> str:
        assert isinstance(data, Signup)
        return f"{data.email}:{data.age}"


@jobwarden.job(max_retries=0)
def ship(order_id: int, lines: list[Line], express: bool = False) -> int:
    assert all(isinstance(line, Line) for line in lines)
    return order_id * 10 + len(lines) + (1 if express else 0)
