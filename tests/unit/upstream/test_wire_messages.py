"""The messages wire, end to end against a fake messages upstream: the client relays the
upstream's bytes, `wire_for(target)` translates them to chat the way the exchange does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from app.upstream.client import UpstreamClient
from app.upstream.results import UpstreamResponse
from app.upstream.sse import StreamAccumulator
from app.upstream.targets import UpstreamTarget
from app.upstream.transport import UpstreamStream
from app.upstream.wire import json_object, wire_for
from tests.fakes.messages_upstream import FakeMessagesUpstream
from tests.unit.upstream.test_messages_upstream import BODY, PROMPT_WORDS, WEATHER_TOOL


@pytest.fixture(scope="module")
def server():
    with FakeMessagesUpstream(name="claude") as m:
        yield m


@pytest.fixture
def fakes(server):
    server.reset()
    return server, None


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


@dataclass
class ChatAnswer:
    """An upstream answer after the wire's translation."""

    status: int
    content: bytes
    json_body: dict[str, Any] | None
    raw: UpstreamResponse


def translated(result: UpstreamResponse) -> ChatAnswer:
    assert not result.local
    status, content = wire_for(result.target).answer(result.status, result.content, result.target)
    return ChatAnswer(status, content, json_object(content), result)


async def complete(client: UpstreamClient, targets: list[UpstreamTarget], body: dict[str, Any]) -> ChatAnswer:
    return translated(await client.complete(targets, body))


async def translate_stream(stream: UpstreamStream, body: dict[str, Any]) -> tuple[StreamAccumulator, bytes]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    translator = wire_for(stream.target).stream_translator(stream.target, include_usage)
    acc = StreamAccumulator()
    raw = b""
    async for chunk in stream.aiter_bytes():
        out = translator.feed(chunk)
        raw += out
        acc.feed_bytes(out)
    tail = translator.finish()
    raw += tail
    acc.feed_bytes(tail)
    acc.close()
    return acc, raw


async def collect(
    client: UpstreamClient, targets: list[UpstreamTarget], body: dict[str, Any]
) -> tuple[StreamAccumulator, bytes]:
    return await translate_stream(await client.stream(targets, body), body)


async def test_complete_translates_both_ways(fakes, client, monkeypatch):
    m, _ = fakes
    monkeypatch.setenv("FAKE_MSG_KEY", "sk-test")
    m.configure(api_key="sk-test", cache_read_tokens=4)
    result = await complete(
        client,
        [messages_target(m, api_key_env="FAKE_MSG_KEY")],
        {**BODY, "stream": True, "stream_options": {}},
    )
    assert result.status == 200, result.content
    seen = m.last_request
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == "sk-test" and seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body["model"] == "claude-test-1" and seen.body["system"] == "Be brief."
    assert seen.body["max_tokens"] == 4096 and "stream" not in seen.body
    chat = result.json_body
    assert chat["object"] == "chat.completion" and chat["model"] == "claude"
    assert chat["choices"][0]["message"]["content"] == "[claude] model=claude-test-1 echo: what is 2+2"
    assert chat["choices"][0]["finish_reason"] == "stop"
    assert chat["usage"]["prompt_tokens"] == PROMPT_WORDS + 4  # the fake counts words; 4 cached tokens
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    assert json.loads(result.content) == chat  # callers that relay bytes see chat too


async def test_max_tokens_and_stop_sequences_reach_the_upstream(fakes, client):
    m, _ = fakes
    long = await complete(client, [messages_target(m)], {**BODY, "max_tokens": 3})
    assert long.json_body["choices"][0]["finish_reason"] == "length"
    assert long.json_body["choices"][0]["message"]["content"] == "[claude] model=claude-test-1 echo:"
    stopped = await complete(client, [messages_target(m)], {**BODY, "stop": ["2+2"]})
    assert (
        stopped.json_body["choices"][0]["message"]["content"] == "[claude] model=claude-test-1 echo: what is "
    )
    assert stopped.json_body["choices"][0]["finish_reason"] == "stop"


async def test_tool_call_round_trip(fakes, client):
    m, _ = fakes
    ask = {"model": "MoM", "messages": [{"role": "user", "content": "What's the weather in New York?"}]}
    ask["tools"] = [WEATHER_TOOL]
    first = await complete(client, [messages_target(m)], ask)
    message = first.json_body["choices"][0]["message"]
    assert first.json_body["choices"][0]["finish_reason"] == "tool_calls"
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["location"] == "New York"
    # Send the call and its result back: the fake checks the tool_use / tool_result pairing.
    follow = {
        **ask,
        "messages": [
            *ask["messages"],
            message,
            {"role": "tool", "tool_call_id": call["id"], "content": "21C and sunny"},
        ],
    }
    second = await complete(client, [messages_target(m)], follow)
    assert second.status == 200, second.content
    assert second.json_body["choices"][0]["message"]["content"] == "[claude] tool result: 21C and sunny"
    assert m.rejected == 0


async def test_upstream_error_body_is_relayed_in_chat_shape(fakes, client):
    m, _ = fakes
    m.configure(fail_status=429, retry_after="3")
    result = await complete(client, [messages_target(m)], BODY)
    assert result.status == 429
    assert result.json_body == {
        "error": {"message": "claude failing with 429", "type": "rate_limit_error", "code": None}
    }


async def test_bad_key_is_a_401_in_chat_shape(fakes, client, monkeypatch):
    m, _ = fakes
    monkeypatch.setenv("FAKE_MSG_KEY", "wrong")
    m.configure(api_key="right")
    result = await complete(client, [messages_target(m, api_key_env="FAKE_MSG_KEY")], BODY)
    assert result.status == 401 and result.json_body["error"]["type"] == "authentication_error"


async def test_stream_is_translated_to_chat_chunks(fakes, client):
    m, _ = fakes
    body = {**BODY, "stream_options": {"include_usage": True}}
    stream = await client.stream([messages_target(m)], body)
    assert stream.status == 200 and stream.is_event_stream
    acc, raw = await translate_stream(stream, body)
    assert m.last_request.body["stream"] is True and "stream_options" not in m.last_request.body
    assert b"event:" not in raw and b"content_block" not in raw  # nothing of the messages wire leaks
    assert acc.done and acc.completed and acc.error is None
    assert acc.content == "[claude] model=claude-test-1 echo: what is 2+2"
    assert acc.finish_reason == "stop"
    reply_words = len(acc.content.split())
    assert acc.usage == {
        "prompt_tokens": PROMPT_WORDS,
        "completion_tokens": reply_words,
        "total_tokens": PROMPT_WORDS + reply_words,
    }
    assert stream.completed and stream.bytes_received > len(raw) / 4


async def test_stream_and_non_stream_agree(fakes, client):
    m, _ = fakes
    whole = await complete(client, [messages_target(m)], BODY)
    acc, _ = await collect(client, [messages_target(m)], BODY)
    assert acc.content == whole.json_body["choices"][0]["message"]["content"]
    assert acc.usage is None  # not asked for: no usage chunk


async def test_stream_tool_call(fakes, client):
    m, _ = fakes
    body = {
        "model": "MoM",
        "messages": [{"role": "user", "content": "weather in Rome please"}],
        "tools": [WEATHER_TOOL],
        "stream_options": {"include_usage": True},
    }
    acc, _ = await collect(client, [messages_target(m)], body)
    assert acc.finish_reason == "tool_calls" and acc.content == "Let me check the weather."
    (call,) = acc.tool_calls
    assert call["id"].startswith("toolu_") and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"location": "Rome", "unit": "celsius"}


async def test_stream_error_event_and_truncation(fakes, client):
    m, _ = fakes
    m.configure(stream_error_after_events=4)
    acc, raw = await collect(client, [messages_target(m)], BODY)
    assert acc.error["type"] == "overloaded_error" and acc.done and not acc.completed
    m.configure(stream_error_after_events=None, end_after_events=5)
    acc, raw = await collect(client, [messages_target(m)], BODY)
    assert acc.error["type"] == "upstream_error" and not acc.completed
    assert raw.endswith(b"data: [DONE]\n\n")


async def test_stream_error_status_is_a_chat_error_document(fakes, client):
    m, _ = fakes
    m.configure(fail_status=400)  # 4xx: not retried, relayed
    stream = await client.stream([messages_target(m)], BODY)
    assert stream.status == 400
    status, content = wire_for(stream.target).answer(stream.status, await stream.read(), stream.target)
    assert status == 400 and json.loads(content) == {
        "error": {"message": "claude failing with 400", "type": "invalid_request_error", "code": None}
    }
