"""How /openapi.json is made true to the app (app/management/openapi.py `served`): 3.0 forms,
request-body definitions hoisted into components, FastAPI's never-answered 422s dropped;
and the management routes answer a parameter that fails its declaration with the
management error body the document names. The whole document against the app:
tests/unit/api/test_openapi_conformance.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Query
from pydantic import BaseModel

from app.common.api_docs import json_body
from app.management.openapi import served, to_openapi_30
from tests.unit.management.test_management_support import Harness


class Leaf(BaseModel):
    name: str


class Tree(BaseModel):
    leaf: Leaf
    note: str | None = None
    other: Leaf | None = None


def test_optional_fields_become_nullable_not_anything() -> None:
    generated = {"openapi": "3.1.0", "components": {"schemas": {"Tree": Tree.model_json_schema()}}}
    tree = to_openapi_30(generated)["components"]["schemas"]["Tree"]
    assert tree["properties"]["note"] == {
        "type": "string",
        "nullable": True,
        "title": "Note",
        "default": None,
    }
    other = tree["properties"]["other"]
    assert other["nullable"] is True and other["allOf"] == [{"$ref": "#/$defs/Leaf"}]


def app_with_body(existing_leaf: dict[str, Any] | None = None) -> FastAPI:
    app = FastAPI()

    @app.post("/tree", openapi_extra=json_body(Tree))
    async def tree() -> dict[str, str]:
        return {}

    @app.get("/search")
    async def search(q: str = Query(max_length=8)) -> dict[str, str]:
        return {"q": q}

    if existing_leaf is not None:
        original = app.openapi

        def with_leaf() -> dict[str, Any]:
            document = original()
            document.setdefault("components", {}).setdefault("schemas", {})["Leaf"] = existing_leaf
            return document

        app.openapi = with_leaf  # type: ignore[method-assign]
    return app


def test_body_definitions_move_into_components() -> None:
    document = served(app_with_body().openapi())
    body = document["paths"]["/tree"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "$defs" not in body
    assert body["properties"]["leaf"] == {"$ref": "#/components/schemas/Leaf"}
    assert document["components"]["schemas"]["Leaf"]["required"] == ["name"]


def test_a_different_schema_of_the_same_name_is_not_overwritten() -> None:
    existing = {"type": "object", "properties": {"colour": {"type": "string"}}}
    document = served(app_with_body(existing).openapi())
    schemas = document["components"]["schemas"]
    body = document["paths"]["/tree"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schemas["Leaf"] == existing
    assert body["properties"]["leaf"] == {"$ref": "#/components/schemas/Leaf-Input"}
    assert schemas["Leaf-Input"]["required"] == ["name"]


def test_fastapi_validation_422_is_not_documented() -> None:
    generated = app_with_body().openapi()
    assert "422" in generated["paths"]["/search"]["get"]["responses"]
    document = served(generated)
    assert "422" not in document["paths"]["/search"]["get"]["responses"]
    assert not {"HTTPValidationError", "ValidationError"} & set(document["components"]["schemas"])


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/config/versions", {"limit": "0"}),
        ("/api/v1/observability/audit", {"limit": "many"}),
        ("/api/v1/config", {"format": "toml"}),
    ],
)
@pytest.mark.slow
async def test_a_management_parameter_fails_with_the_management_body(path: str, params: dict[str, str]):
    async with Harness().client() as client:
        response = await client.get(path, params=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["timestamp"].endswith("Z")
    assert next(iter(params)) in error["message"]


@pytest.mark.slow
async def test_a_blank_idempotency_key_is_invalid_input():
    async with Harness().client() as client:
        response = await client.post(
            "/api/v1/observability/outcomes",
            json={"replay_id": "r", "target": "t", "verdict": "good"},
            headers={"Idempotency-Key": ""},
        )
    assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_INPUT"
