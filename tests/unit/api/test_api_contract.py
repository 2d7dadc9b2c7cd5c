"""What the OpenAPI document promises, the handlers keep (docs/management-api.md): 428 before
anything reads the resource, request types as strict as the schema states them, an explicit
null refused where the schema shows none, a feature that is off answered 404 FEATURE_DISABLED,
405s that list every method of their path. In process; the live graph's schemathesis run is
tests/integration/test_api_promises.py."""

from __future__ import annotations

from typing import Any

import pytest

from app.cache.admin import LocalCacheAdmin, store_control
from app.cache.memory import InMemorySemanticCache
from app.common.api_docs import MAX_SEQUENCE
from app.management.openapi import to_openapi_30
from tests.unit.management.test_management_support import Harness, error_code


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", "/api/v1/config/recipes/default", None),  # reserved: 409 with an If-Match
        ("DELETE", "/api/v1/config/recipes/nosuch", None),  # unknown: 404 with an If-Match
        ("POST", "/api/v1/config/rollback", {"version": 0}),  # no such version: 404
        ("POST", "/api/v1/config/rollback", {"nonsense": True}),  # a bad body: 400
        ("PUT", "/api/v1/config/recipes/x", {"bogus": 1}),
        ("PATCH", "/api/v1/config", "{not yaml: ["),
        ("PUT", "/api/v1/config", "{}"),
    ],
)
async def test_a_missing_if_match_is_428_before_anything_else(method: str, path: str, body: Any) -> None:
    harness = Harness()
    async with harness.client() as api:
        options: dict[str, Any] = {"content": body} if isinstance(body, str) else {"json": body}
        answer = await api.request(method, path, **({} if body is None else options))
        assert answer.status_code == 428 and error_code(answer) == "PRECONDITION_REQUIRED", answer.text
        assert answer.headers["etag"] == harness.management.activation.etag
        audit = (await api.get("/api/v1/observability/audit")).json()["entries"]
    assert audit[-1]["status"] == 428 and audit[-1]["path"] == path


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/diagnostics/classify/intent", {"text": "hi", "options": {"include_explanation": 0}}),
        ("/api/v1/classify/pii", {"text": "hi", "options": {"mask_entities": 1}}),
        (
            "/api/v1/routing/preview",
            {
                "model": "MoM",
                "messages": [{"role": "user", "content": "hi"}],
                "preview_context": {"seed": False},
            },
        ),
        ("/api/v1/storage/response-cache/invalidate", {"dry_run": 0}),
        ("/api/v1/config/rollback", {"version": None, "config_version": 1}),  # null: leave it out
        ("/api/v1/diagnostics/embeddings", {"texts": ["a"], "dimension": "384"}),
    ],
)
async def test_request_types_are_as_strict_as_the_document(path: str, body: dict[str, Any]) -> None:
    async with Harness().client() as api:
        answer = await api.post(path, json=body, headers={"If-Match": "x"})
    assert answer.status_code == 400 and error_code(answer) == "INVALID_INPUT", answer.text


async def test_the_types_json_has_still_pass() -> None:
    cache = LocalCacheAdmin(store_control(InMemorySemanticCache(max_entries=10, ttl_seconds=60)))
    async with Harness(cache_admin=cache).client() as api:
        answer = await api.post(
            "/api/v1/storage/response-cache/invalidate", json={"dry_run": True, "scope": None}
        )
        assert answer.status_code == 200, answer.text  # scope: null is documented (nullable)
        flushed = await api.post("/api/v1/storage/response-cache/flush")  # no body: the global cache
        assert flushed.status_code == 200 and flushed.json()["scope"] == "global", flushed.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/storage/memories?scope=user:ada"),
        ("DELETE", "/api/v1/storage/memories?scope=user:ada"),
        ("GET", "/api/v1/storage/memories/mem_1"),
        ("GET", "/api/v1/observability/replays"),
    ],
)
async def test_a_feature_that_is_off_is_404_feature_disabled(method: str, path: str) -> None:
    async with Harness().client() as api:  # no memory store, no replay records
        answer = await api.request(method, path)
        document = (await api.get("/openapi.json")).json()
    assert answer.status_code == 404 and error_code(answer) == "FEATURE_DISABLED", answer.text
    template = path.split("?")[0].replace("mem_1", "{memory_id}")
    operation = document["paths"][template][method.lower()]
    assert "FEATURE_DISABLED" in operation["responses"]["404"]["description"]


async def test_405_names_every_method_the_document_lists() -> None:
    async with Harness().client() as api:
        document = (await api.get("/openapi.json")).json()
        for path in (
            "/api/v1/storage/vector-stores",
            "/api/v1/observability/outcomes",
            "/v1/responses/{rid}",
        ):
            concrete = path.replace("{rid}", "resp_1")
            answer = await api.request("OPTIONS", concrete)
            assert answer.status_code == 405, (path, answer.text)
            documented = document["paths"][path.replace("{rid}", "{response_id}")]
            assert set(answer.headers["allow"].split(", ")) == {m.upper() for m in documented}, path


def test_a_nullable_enum_lists_null() -> None:
    schema = {"anyOf": [{"enum": ["a", "b"], "type": "string"}, {"type": "null"}]}
    document = {"components": {"schemas": {"X": schema}}, "paths": {}}
    assert to_openapi_30(document)["components"]["schemas"]["X"] == {
        "enum": ["a", "b", None],
        "type": "string",
        "nullable": True,
    }


async def test_bodies_a_route_does_without_are_documented_optional() -> None:
    async with Harness().client() as api:
        paths = (await api.get("/openapi.json")).json()["paths"]
    assert paths["/api/v1/storage/response-cache/flush"]["post"]["requestBody"]["required"] is False
    assert paths["/api/v1/storage/vector-stores"]["post"]["requestBody"]["required"] is False
    assert paths["/api/v1/config/validate"]["post"]["requestBody"]["required"] is False
    assert paths["/api/v1/storage/response-cache/invalidate"]["post"]["requestBody"]["required"] is True


async def test_a_page_cursor_is_bounded_as_documented() -> None:
    async with Harness().client() as api:
        params = (await api.get("/openapi.json")).json()["paths"]["/api/v1/observability/audit"]["get"]
        [cursor] = [p for p in params["parameters"] if p["name"] == "after_sequence"]
        assert cursor["schema"]["maximum"] == MAX_SEQUENCE
        answer = await api.get("/api/v1/observability/audit", params={"after_sequence": MAX_SEQUENCE + 1})
        assert answer.status_code == 400 and error_code(answer) == "INVALID_INPUT", answer.text
        assert (
            await api.get("/api/v1/observability/audit", params={"after_sequence": MAX_SEQUENCE})
        ).is_success
