"""The Responses API store: GET|DELETE /v1/responses/{id}, input_items, previous_response_id,
through the official OpenAI SDK against the Ingress app (in process, no Ray), on the replica's
memory and on the management store's Redis (two apps over one Redis: two Ingress replicas)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.api.app import StaticConfigView, create_app
from app.api.parts import DataPlaneStores, IngressParts
from app.config.loader import parse_config
from app.exchange.responses.store import (
    MemoryResponseRecordStore,
    RedisResponseRecordStore,
    ResponseRecordStore,
)
from app.exchange.responses.stored import StoredResponse
from app.management.service import Management
from app.pipeline import PipelineServices, RouterPipeline
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client
from app.upstream.client import UpstreamClient
from tests.fakes.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="gpt") as fake:
        yield fake


def plane(
    upstream: FakeUpstream,
    services: dict[str, Any] | None = None,
    response_store: ResponseRecordStore | None = None,
    rate_buckets: Any = None,
) -> FastAPI:
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "gpt"},
            "models": [{"name": "gpt", "backend_refs": [{"base_url": upstream.base_url}]}],
        },
        "global": {"services": services or {}},
    }
    config = parse_config(document).config
    view = StaticConfigView(config)
    management = Management(config, config_view=view)
    parts = IngressParts(data_plane=DataPlaneStores(response_store, rate_buckets))
    return create_app(
        RouterPipeline(config, PipelineServices()), UpstreamClient(), view, management=management, parts=parts
    )


def sdk(app: FastAPI, key: str = "sk-test") -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return openai.AsyncOpenAI(api_key=key, base_url="http://svc/v1", http_client=http, max_retries=0)


def redis_backend(url: str, prefix: str) -> RedisResponseRecordStore:
    return RedisResponseRecordStore(redis_client(ManagementStoreSettings(backend="redis", url=url)), prefix)


def sent_messages(upstream: FakeUpstream) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in upstream.requests[-1].body["messages"]]


@pytest.fixture(params=["memory", "redis"])
def two_replicas(request: pytest.FixtureRequest, upstream: FakeUpstream) -> tuple[FastAPI, FastAPI]:
    """Two Ingress apps: over one Redis prefix (a conversation goes on at either), or one app twice."""
    if request.param == "memory":
        app = plane(upstream)
        return app, app
    url, prefix = request.getfixturevalue("redis_url"), f"svc_sr:test:{uuid.uuid4().hex}:"
    return plane(upstream, response_store=redis_backend(url, prefix)), plane(
        upstream, response_store=redis_backend(url, prefix)
    )


@pytest.mark.slow
async def test_a_conversation_continues_is_retrieved_listed_and_deleted(two_replicas, upstream):
    one, other = sdk(two_replicas[0]), sdk(two_replicas[1])
    first = await one.responses.create(model="MoM", input="My name is Ada.", instructions="Be brief.")
    assert first.store is True
    second = await other.responses.create(
        model="MoM", input="What is my name?", previous_response_id=first.id
    )
    # The stored turn goes first; the first request's instructions are not carried over.
    assert sent_messages(upstream) == [
        ("user", "My name is Ada."),
        ("assistant", first.output_text),
        ("user", "What is my name?"),
    ]
    assert second.previous_response_id == first.id
    third = await one.responses.create(
        model="MoM", input="And again?", previous_response_id=second.id, instructions="Be kind."
    )
    assert [role for role, _ in sent_messages(upstream)] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]

    got = await one.responses.retrieve(third.id)
    assert (got.id, got.output_text, got.previous_response_id) == (third.id, third.output_text, second.id)
    items = await other.responses.input_items.list(third.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "And again?")]

    await other.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await one.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as missing:
        await one.responses.create(model="MoM", input="hi", previous_response_id=first.id)
    assert missing.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        await one.responses.delete(first.id)


async def test_a_streamed_answer_is_kept_by_the_time_it_ends(upstream):
    client = sdk(plane(upstream))
    stream = await client.responses.create(model="MoM", input="Count to three.", stream=True)
    events = [event async for event in stream]
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.store is True
    kept = await client.responses.retrieve(final.id)
    assert kept.output_text == final.output_text
    await client.responses.create(model="MoM", input="Go on.", previous_response_id=final.id)
    assert sent_messages(upstream)[-2:] == [("assistant", final.output_text), ("user", "Go on.")]


@pytest.mark.slow
async def test_input_items_pages_in_both_orders(upstream):
    client = sdk(plane(upstream))
    turns = [{"role": "user", "content": f"turn {n}"} for n in range(3)]
    answer = await client.responses.create(model="MoM", input=turns)
    newest = await client.responses.input_items.list(answer.id, limit=2)
    assert [i.content[0].text for i in newest.data] == ["turn 2", "turn 1"] and newest.has_more
    rest = await client.responses.input_items.list(answer.id, limit=2, after=newest.last_id)
    assert [i.content[0].text for i in rest.data] == ["turn 0"] and not rest.has_more
    oldest = await client.responses.input_items.list(answer.id, order="asc")
    assert [i.content[0].text for i in oldest.data] == ["turn 0", "turn 1", "turn 2"]


@pytest.mark.slow
async def test_store_false_and_a_disabled_store(upstream):
    client = sdk(plane(upstream))
    unkept = await client.responses.create(model="MoM", input="hi", store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(unkept.id)

    off = sdk(plane(upstream, {"response_api": {"enabled": False}}))
    answer = await off.responses.create(model="MoM", input="hi")
    with pytest.raises(openai.NotFoundError) as disabled:
        await off.responses.retrieve(answer.id)
    assert disabled.value.code == "response_store_disabled"
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        await off.responses.create(model="MoM", input="hi", previous_response_id=answer.id)


class DownStore(MemoryResponseRecordStore):
    async def put(self, record: StoredResponse, ttl_s: int, max_items: int) -> None:
        raise StoreUnavailable("management store: responses put failed: down")

    async def get(self, response_id: str) -> StoredResponse | None:
        raise StoreUnavailable("management store: responses get failed: down")


async def test_a_store_that_is_down_fails_only_what_needs_it(upstream):
    app = plane(upstream, response_store=DownStore())
    client = sdk(app)
    answer = await client.responses.create(model="MoM", input="hi")  # answered, not kept
    assert answer.output_text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as http:
        got = await http.get(f"/v1/responses/{answer.id}")
        chained = await http.post(
            "/v1/responses", json={"model": "MoM", "input": "hi", "previous_response_id": answer.id}
        )
    for refused in (got, chained):
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "response_store_unavailable"


# -- the backends -----------------------------------------------------------------------------------
def record(n: int) -> StoredResponse:
    return StoredResponse(id=f"resp_{n}", created_at=n, response={"id": f"resp_{n}"})


async def test_memory_backend_keeps_records_for_their_ttl_and_up_to_the_cap():
    now = [100.0]
    store = MemoryResponseRecordStore(clock=lambda: now[0])
    for n in range(3):
        await store.put(record(n), ttl_s=10, max_items=2)
    assert await store.get("resp_0") is None  # the oldest past the cap
    assert (await store.get("resp_2")) == record(2)
    now[0] += 10
    assert await store.get("resp_1") is None and await store.get("resp_2") is None
    assert not await store.delete("resp_2")


async def test_redis_backend_keeps_records_for_their_ttl_and_up_to_the_cap(redis_url):
    prefix = f"svc_sr:test:{uuid.uuid4().hex}:"
    store = redis_backend(redis_url, prefix)
    for n in range(3):
        await store.put(record(n), ttl_s=30, max_items=2)
    assert await store.get("resp_0") is None
    assert await store.get("resp_1") == record(1)
    client = redis_client(ManagementStoreSettings(backend="redis", url=redis_url))
    assert 0 < client.ttl(f"{prefix}resp:resp_1") <= 30
    assert await store.delete("resp_1") and not await store.delete("resp_1")
    assert client.zrange(f"{prefix}resp:order", 0, -1) == [b"resp_2"]
