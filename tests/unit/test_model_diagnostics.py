"""The model diagnostics routes in-process: prepared bindings, foreign recipe, binding lookup."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from app.api.diagnostics_requests import ManagementError
from app.api.model_bindings import find_binding, prepared_bindings
from app.api.model_diagnostics import model_diagnostics_router


def client() -> httpx.AsyncClient:
    app = FastAPI()
    app.include_router(model_diagnostics_router())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_lists_prepared_bindings_of_default_recipe() -> None:
    async with client() as c:
        r = await c.get("/api/v1/diagnostics/models", params={"recipe": "default"})
    assert r.status_code == 200
    body = r.json()
    assert body["recipe"] == "default"
    names = {b["binding"] for b in body["bindings"]}
    assert {"embedding", "domain"} <= names
    domain = next(b for b in body["bindings"] if b["binding"] == "domain")
    assert domain["provider"] == "graph"
    assert domain["revision"].startswith("sha256:")
    assert domain["limits"]["input_max_tokens"] > 0


async def test_foreign_recipe_is_explicit_404() -> None:
    async with client() as c:
        r = await c.get("/api/v1/diagnostics/models", params={"recipe": "other"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "RECIPE_NOT_FOUND"


def test_unknown_binding_raises_not_found() -> None:
    assert find_binding("default", "domain").task == "sequence_classification"
    with pytest.raises(ManagementError) as err:
        find_binding("default", "gpt-nope")
    assert err.value.status == 404 and err.value.code == "BINDING_NOT_FOUND"
    with pytest.raises(ManagementError):
        prepared_bindings("elsewhere")
