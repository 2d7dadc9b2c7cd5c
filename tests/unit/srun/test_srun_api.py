"""The frontend's native decision API (app/api/decisions.py) through ASGI, without Ray: fixed
public error words, Retry-After, the deadline, and the model list."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.decisions import LocalDecisionSource, decisions_router
from app.runtime.schemas import Overloaded
from app.srun.catalog import DECISION_MODEL, load

QUESTION = {
    "type": "choice",
    "criteria": {"billing": "payments and refunds", "shipping": "delivery and tracking"},
}


@pytest.fixture(scope="module")
def model():
    return load(DECISION_MODEL)


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://router")


@pytest.mark.slow
async def test_decisions_and_systemone_answer(model):
    app = FastAPI()
    app.include_router(decisions_router(LocalDecisionSource(model)))
    async with client_for(app) as client:
        for path in ("/v1/decisions", "/v1/systemone"):
            response = await client.post(
                path, json={"state": "where is my parcel", "questions": {"q": QUESTION}}
            )
            assert response.status_code == 200
            assert response.json()["answers"]["q"]["choice"] == "shipping"
        models = (await client.get("/v1/systemone/models")).json()
        assert models["data"][0]["name"] == DECISION_MODEL
        assert "/v1/decisions" in (await client.get("/openapi.json")).json()["paths"]


async def test_errors_use_fixed_public_words(model):
    app = FastAPI()
    app.include_router(decisions_router(LocalDecisionSource(model), max_body_bytes=2000))
    async with client_for(app) as client:
        bad = await client.post("/v1/decisions", json={"state": "x", "questions": {"q": {"type": "set"}}})
        assert bad.status_code == 400
        assert bad.json() == {"error": {"code": "invalid_request", "message": "invalid request"}}
        assert (await client.post("/v1/decisions", content=b"[1")).status_code == 400
        assert (await client.post("/v1/decisions", json=["not", "an", "object"])).status_code == 400
        big = await client.post("/v1/decisions", json={"state": "x" * 5000, "questions": {"q": QUESTION}})
        assert big.status_code == 413


class _Busy:
    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        raise Overloaded("internal queue details that must stay private")

    async def models(self) -> list[dict[str, Any]]:
        return []


class _Slow(_Busy):
    """Never answers: the router's deadline must."""

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}


async def test_overload_and_deadline():
    app = FastAPI()
    app.include_router(decisions_router(_Busy()), prefix="/busy")
    app.include_router(decisions_router(_Slow(), deadline_s=0.05), prefix="/slow")
    async with client_for(app) as client:
        busy = await client.post("/busy/v1/decisions", json={"state": "x"})
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert "private" not in busy.text
        slow = await client.post("/slow/v1/systemone", json={"state": "x"})
        assert slow.status_code == 504 and slow.json()["error"]["code"] == "systemone_deadline_exceeded"
