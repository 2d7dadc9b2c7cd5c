"""Every data-plane route asks the key gate, not only the exchange's (the Ingress app in
process, the real pipeline, the OpenAI SDK, a fake upstream on 127.0.0.1): /v1/models lists
only the caller's granted models beside MoM, a stored response is read, listed, continued and
deleted only by the key that created it (another key gets 404, as if absent), and the native
decision API answers 401 without a key where keys are required."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from app.keys.records import KeyStore
from tests.fakes.upstream import FakeUpstream
from tests.unit.keys.test_keys_api import http, ingress, issue, sdk


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="llm") as fake:
        yield fake


DATA_PLANE_READS = [
    ("GET", "/v1/models"),
    ("GET", "/v1/responses/resp_x"),
    ("DELETE", "/v1/responses/resp_x"),
    ("GET", "/v1/responses/resp_x/input_items"),
    ("POST", "/v1/decisions"),
    ("POST", "/v1/systemone"),
    ("GET", "/v1/systemone/models"),
]


@pytest.mark.parametrize(("method", "path"), DATA_PLANE_READS)
async def test_every_data_plane_route_is_401_without_a_known_key(
    upstream: FakeUpstream, method: str, path: str
) -> None:
    app = ingress(upstream)
    async with http(app) as client:
        for headers, code in (({}, "missing_api_key"), ({"x-api-key": "sk-svc-nope"}, "invalid_api_key")):
            answer = await client.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (path, answer.text)
            assert answer.headers["www-authenticate"] == "Bearer"
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("authentication_error", code)


async def test_models_lists_only_the_granted_models_and_mom(upstream: FakeUpstream) -> None:
    app = ingress(upstream)
    cheap = (await issue(app, name="cheap", models=["cheap"]))["key"]
    both = (await issue(app, name="both", models=["cheap", "pricey"]))["key"]
    assert [m.id async for m in sdk(app, cheap).models.list()] == ["MoM", "cheap"]
    assert [m.id async for m in sdk(app, both).models.list()] == ["MoM", "pricey", "cheap"]


async def test_a_listener_without_keys_lists_every_model_to_a_caller_without_one(
    upstream: FakeUpstream,
) -> None:
    app = ingress(upstream, required=False)
    async with http(app) as client:
        listed = (await client.get("/v1/models")).json()["data"]
    assert [m["id"] for m in listed] == ["MoM", "pricey", "cheap", "other"]


async def test_a_stored_response_belongs_to_the_key_that_created_it(upstream: FakeUpstream) -> None:
    app = ingress(upstream, KeyStore(cache_seconds=0))
    mine = sdk(app, (await issue(app, name="mine", models=["cheap"]))["key"])
    theirs = sdk(app, (await issue(app, name="theirs", models=["cheap"]))["key"])
    created = await mine.responses.create(model="MoM", input="hello there")
    assert (await mine.responses.retrieve(created.id)).id == created.id
    assert [i.type async for i in mine.responses.input_items.list(created.id)] == ["message"]
    with pytest.raises(openai.NotFoundError) as retrieved:
        await theirs.responses.retrieve(created.id)
    assert retrieved.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        await theirs.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        await theirs.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as continued:
        await theirs.responses.create(model="MoM", input="and then?", previous_response_id=created.id)
    assert continued.value.code == "previous_response_not_found"
    follow = await mine.responses.create(model="MoM", input="and then?", previous_response_id=created.id)
    assert follow.status == "completed"
    await mine.responses.delete(created.id)  # still there after the other key's delete
    with pytest.raises(openai.NotFoundError):
        await mine.responses.retrieve(created.id)


async def test_a_response_made_without_a_key_is_not_another_keys(upstream: FakeUpstream) -> None:
    app = ingress(upstream, required=False)
    keyed = sdk(app, (await issue(app, name="k", models=["cheap"]))["key"])
    async with http(app) as client:
        made = await client.post("/v1/responses", json={"model": "MoM", "input": "hello there"})
        assert made.status_code == 200, made.text
        rid = made.json()["id"]
        assert (await client.get(f"/v1/responses/{rid}")).status_code == 200
    with pytest.raises(openai.NotFoundError):
        await keyed.responses.retrieve(rid)


async def test_decisions_with_a_key_reach_the_decision_api(upstream: FakeUpstream) -> None:
    app = ingress(upstream)
    key = (await issue(app, name="d", models=["cheap"]))["key"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as client:
        answer = await client.get("/v1/systemone/models", headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 200 and answer.json()["object"] == "list"
