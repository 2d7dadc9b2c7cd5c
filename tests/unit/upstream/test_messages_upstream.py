"""UpstreamClient and the data plane against a real messages-style HTTP fake (`POST /v1/messages`)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.api.app import StaticConfigView, create_app
from app.config.loader import parse_config
from app.config.reliability import FallbackConfig, ReliabilityConfig
from app.pipeline import PipelineServices, RouterPipeline
from app.upstream.client import UpstreamClient
from app.upstream.results import UpstreamUnavailable
from app.upstream.sse import StreamAccumulator
from app.upstream.targets import UpstreamTarget
from tests.fakes.messages_upstream import FakeMessagesUpstream
from tests.fakes.upstream import FakeUpstream

BODY = {
    "model": "MoM",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what is 2+2"}],
}
PROMPT_WORDS = sum(len(m["content"].split()) for m in BODY["messages"])  # the fake counts words
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def servers():
    with FakeMessagesUpstream(name="claude") as m, FakeUpstream(name="gpt") as o:
        yield m, o


@pytest.fixture
def fakes(servers):
    for fake in servers:
        fake.reset()
    return servers


@pytest.fixture
async def client():
    async def no_wait(seconds: float) -> None:
        return None

    async with UpstreamClient(sleep=no_wait) as c:
        yield c


def messages_target(fake: FakeMessagesUpstream, model: str = "claude", **kw: Any) -> UpstreamTarget:
    return UpstreamTarget(
        model=model, provider_model_id="claude-test-1", base_url=fake.base_url, api_format="anthropic", **kw
    )


def chat_target(fake: FakeUpstream, model: str = "gpt") -> UpstreamTarget:
    return UpstreamTarget(model=model, base_url=fake.base_url)


async def collect(stream) -> tuple[StreamAccumulator, bytes]:
    acc = StreamAccumulator()
    raw = b""
    async for chunk in stream.aiter_bytes():
        raw += chunk
        acc.feed_bytes(chunk)
    acc.close()
    return acc, raw


# -- the client relays the upstream's own bytes (translation: test_wire_messages.py) ---------------
async def test_complete_relays_the_raw_message(fakes, client, monkeypatch):
    m, _ = fakes
    monkeypatch.setenv("FAKE_MSG_KEY", "sk-test")
    m.configure(api_key="sk-test")
    result = await client.complete([messages_target(m, api_key_env="FAKE_MSG_KEY")], BODY)
    assert result.status == 200 and not result.local and result.target.model == "claude"
    assert m.last_request.path == "/v1/messages" and m.last_request.headers["x-api-key"] == "sk-test"
    assert result.json_body["type"] == "message" and json.loads(result.content) == result.json_body
    assert result.json_body["content"][0]["text"] == "[claude] model=claude-test-1 echo: what is 2+2"


async def test_stream_relays_the_raw_event_stream(fakes, client):
    m, _ = fakes
    stream = await client.stream([messages_target(m)], BODY)
    assert stream.status == 200 and stream.is_event_stream and not stream.local
    raw = await stream.read()
    assert b"event: message_start" in raw and b"event: message_stop" in raw
    assert stream.completed and stream.bytes_received == len(raw)


async def test_error_status_is_relayed_raw(fakes, client):
    m, _ = fakes
    m.configure(fail_status=400)  # 4xx: not retried, relayed
    result = await client.complete([messages_target(m)], BODY)
    assert result.status == 400 and not result.local
    assert result.json_body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "claude failing with 400"},
    }


# -- non-stream ---------------------------------------------------------------------------------
async def test_untranslatable_request_is_a_local_400(fakes, client):
    m, _ = fakes
    bad = {**BODY, "n": 3}
    result = await client.complete([messages_target(m)], bad)
    assert result.status == 400 and "n > 1" in result.json_body["error"]["message"]
    assert result.json_body["error"]["code"] == "unsupported_for_upstream_format"
    assert m.requests == []  # nothing was sent
    assert [(a.model, a.status) for a in result.attempts] == [("claude", 400)]
    assert result.local  # already a chat error body: nothing for the exchange to translate
    stream = await client.stream([messages_target(m)], bad)
    assert stream.local
    assert (
        stream.status == 400
        and json.loads(await stream.read())["error"]["code"] == "unsupported_for_upstream_format"
    )


async def test_untranslatable_request_falls_back_when_400_is_listed(fakes, client):
    m, o = fakes
    fallback = FallbackConfig(retryable_status_codes=[400, 500])
    result = await client.complete(
        [messages_target(m), chat_target(o)], {**BODY, "n": 2}, None, None, fallback
    )
    assert result.status == 200 and result.target.model == "gpt"
    assert [(a.model, a.status, a.error) for a in result.attempts] == [
        ("claude", 400, "status"),
        ("gpt", 200, None),
    ]


# -- fallback -------------------------------------------------------------------------------------
async def test_failing_messages_upstream_falls_back_to_a_chat_upstream(fakes, client):
    m, o = fakes
    m.configure(fail_status=500)
    result = await client.complete([messages_target(m), chat_target(o)], BODY, None, None, FallbackConfig())
    assert result.status == 200 and result.target.model == "gpt"
    assert result.json_body["choices"][0]["message"]["content"] == "[gpt] model=gpt echo: what is 2+2"
    assert [(a.model, a.status) for a in result.attempts] == [("claude", 500), ("gpt", 200)]
    assert o.last_request.body["messages"] == BODY["messages"]  # the chat upstream gets chat, untouched


async def test_overloaded_is_retried_then_reported(fakes, client):
    m, _ = fakes
    m.configure(fail_status=529, fail_times=1)
    rel = ReliabilityConfig(retry_count=1, retry_on="5xx")
    result = await client.complete([messages_target(m)], BODY, None, rel)
    assert result.status == 200 and [a.status for a in result.attempts] == [529, 200]
    m.configure(fail_status=529, fail_times=None)
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete([messages_target(m)], BODY)
    last = info.value.last_response
    assert last is not None and last.status == 529
    assert last.json_body["error"]["type"] == "overloaded_error"


async def test_stream_falls_back_from_messages_to_chat(fakes, client):
    m, o = fakes
    m.configure(fail_status=503)
    stream = await client.stream([messages_target(m), chat_target(o)], BODY, None, None, FallbackConfig())
    acc, _ = await collect(stream)
    assert stream.target.model == "gpt" and acc.content.startswith("[gpt]") and acc.done


# -- through the data plane (ASGI app, in-process pipeline, no Ray) -----------------------------------
def app_for(m: FakeMessagesUpstream, o: FakeUpstream):
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "gpt"},
            "models": [
                {
                    "name": "claude",
                    "api_format": "Anthropic",
                    "provider_model_id": "claude-test-1",
                    "pricing": {
                        "currency": "USD",
                        "prompt_per_1m": 1_000_000,
                        "completion_per_1m": 2_000_000,
                    },
                    "backend_refs": [{"base_url": m.base_url}],
                },
                {"name": "gpt", "backend_refs": [{"base_url": o.base_url}]},
            ],
        },
    }
    config = parse_config(document).config
    pipeline = RouterPipeline(config, PipelineServices())
    return create_app(router=pipeline, upstream=UpstreamClient(), config=StaticConfigView(config))


@pytest.mark.slow
async def test_data_plane_serves_a_messages_model(fakes):
    m, o = fakes
    app = app_for(m, o)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as http:
        ask = {"model": "claude", "messages": [{"role": "user", "content": "hello there"}]}
        answer = await http.post("/v1/chat/completions", json=ask)
        streamed = await http.post("/v1/chat/completions", json={**ask, "stream": True})
        refused = await http.post("/v1/chat/completions", json={**ask, "n": 2})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-selected-model"] == "claude"
    body = answer.json()
    assert body["choices"][0]["message"]["content"] == "[claude] model=claude-test-1 echo: hello there"
    # the fake counts words as tokens: 1 per prompt token, 2 per completion token
    reply_words = len(body["choices"][0]["message"]["content"].split())
    assert body["usage"]["completion_tokens"] == reply_words
    assert body["routing_metadata"]["cost"] == pytest.approx(2 * 1 + reply_words * 2)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    acc = StreamAccumulator()
    acc.feed_bytes(streamed.content)
    assert acc.completed and acc.content == body["choices"][0]["message"]["content"]
    assert acc.usage["completion_tokens"] == reply_words  # the data plane asks for usage on streams
    assert refused.status_code == 400 and "n > 1" in refused.json()["error"]["message"]
    assert [r.path for r in m.requests] == ["/v1/messages", "/v1/messages"]


async def test_data_plane_error_mapping_for_messages_models(fakes):
    m, o = fakes
    app = app_for(m, o)
    transport = httpx.ASGITransport(app=app)
    ask = {"model": "claude", "messages": [{"role": "user", "content": "hello there"}]}
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as http:
        refused = await http.post("/v1/chat/completions", json={**ask, "stream": True, "n": 2})
        refused_responses = await http.post(
            "/v1/responses",
            json={
                "model": "claude",
                "input": "hi",
                "stream": True,
                "text": {"format": {"type": "json_object"}},
            },
        )
        assert m.requests == []  # refused locally: nothing was sent
        m.configure(answer_body='{"type": "message", "content": "not blocks"}')
        malformed = await http.post("/v1/chat/completions", json=ask)
        m.configure(answer_body="<html>proxy page</html>", answer_content_type="text/html")
        not_json = await http.post("/v1/chat/completions", json=ask)
        m.configure(
            answer_body=None, stream_body='event: error\ndata: {"type": "error", "error": {"type": 5}}\n\n'
        )
        broken_stream = await http.post("/v1/chat/completions", json={**ask, "stream": True})
        m.configure(stream_body=None)
        ok = await http.post("/v1/chat/completions", json=ask)
    # A stream request the backend cannot express: a JSON 400, not an event stream.
    for response in (refused, refused_responses):
        assert response.status_code == 400 and response.headers["content-type"] == "application/json"
        assert response.json()["error"]["code"] == "unsupported_for_upstream_format"
    assert refused.headers["x-selected-model"] == "claude"
    # An answer that is no message: 502 in the chat error shape, as the Envoy bridge answers.
    for response in (malformed, not_json):
        assert response.status_code == 502 and response.headers["content-type"] == "application/json"
        assert response.json()["error"]["type"] == "upstream_error" and "proxy page" not in response.text
    # A stream that cannot be translated ends cleanly with an error chunk and [DONE].
    assert broken_stream.status_code == 200
    acc = StreamAccumulator()
    acc.feed_bytes(broken_stream.content)
    assert acc.done and acc.error["type"] == "upstream_error" and not acc.completed
    assert b"event:" not in broken_stream.content
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"].endswith("hello there")


def hashed_embed():
    """Deterministic unit vectors: equal texts match exactly, different texts do not."""
    import hashlib

    import numpy as np

    async def embed(texts: list[str]):
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            row = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows)

    return embed


@pytest.mark.slow
async def test_data_plane_caches_only_finished_messages_streams(fakes):

    from app.cache.memory import InMemorySemanticCache
    from app.pipeline import cache_calls

    m, o = fakes
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "gpt"},
            "models": [
                {"name": "claude", "api_format": "messages", "backend_refs": [{"base_url": m.base_url}]},
                {"name": "gpt", "backend_refs": [{"base_url": o.base_url}]},
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "c", "operator": "OR", "keywords": ["cachemsg"]}]},
            "decisions": [
                {
                    "name": "cached",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "c"}]},
                    "modelRefs": [{"model": "claude"}],
                    "plugins": [
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.99},
                        }
                    ],
                }
            ],
        },
        "global": {"stores": {"response_cache": {"enabled": True}}},
    }
    config = parse_config(document).config
    calls = cache_calls(InMemorySemanticCache())
    pipeline = RouterPipeline(
        config,
        PipelineServices(
            embed=hashed_embed(), cache_lookup=calls.lookup, cache_store=calls.store, cache_epoch=calls.epoch
        ),
    )
    app = create_app(router=pipeline, upstream=UpstreamClient(), config=StaticConfigView(config))
    plane = app.state.plane

    async def drain() -> None:
        await plane.background.drain()

    def ask(text: str, stream: bool) -> dict[str, Any]:
        return {"model": "MoM", "stream": stream, "messages": [{"role": "user", "content": text}]}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as http:
        whole = await http.post("/v1/chat/completions", json=ask("cachemsg finished", True))
        m.configure(end_after_events=5)  # cut short: no stop_reason
        cut = await http.post("/v1/chat/completions", json=ask("cachemsg cut short", True))
        m.configure(end_after_events=None, stream_error_after_events=4)  # an error event mid-stream
        errored = await http.post("/v1/chat/completions", json=ask("cachemsg errored", True))
        m.configure(stream_error_after_events=None)
        await drain()
        sent = len(m.requests)
        hit = await http.post("/v1/chat/completions", json=ask("cachemsg finished", False))
        assert len(m.requests) == sent  # the finished stream was cached
        for question in ("cachemsg cut short", "cachemsg errored"):
            again = await http.post("/v1/chat/completions", json=ask(question, False))
            assert again.status_code == 200 and again.headers["x-cache-status"] == "miss", question
        assert len(m.requests) == sent + 2  # the partial answers were not
    assert hit.headers["x-cache-status"] == "hit"
    text = StreamAccumulator()
    text.feed_bytes(whole.content)
    assert text.completed and hit.json()["choices"][0]["message"]["content"] == text.content
    for partial in (cut, errored):
        acc = StreamAccumulator()
        acc.feed_bytes(partial.content)
        assert acc.done and acc.error is not None and not acc.completed
