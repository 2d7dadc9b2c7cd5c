"""Messages-style upstreams behind the real Envoy: OpenAI clients -> Envoy -> ext_proc bridge ->
a project-written `POST /v1/messages` server (tests/fakes/messages_upstream.py), no Ray.

The fake checks requests as strictly as the real API (a chat-shaped body is refused) and
requires `x-api-key` + `anthropic-version`, so every 200 here proves the bridge translated
the request and set the credentials.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from app.upstream.sse import SSEParser, StreamAccumulator
from tests.envoy.conftest import CHAT_KEY, MESSAGES_KEY, MessagesStack

SYSTEM = {"role": "system", "content": "Be brief."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}


def client(stack: MessagesStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.v1, api_key="client-key", max_retries=0)


def post(stack: MessagesStack, body: dict[str, Any], path: str = "/chat/completions") -> httpx.Response:
    return httpx.post(
        f"{stack.v1}{path}", json=body, headers={"authorization": "Bearer client-key"}, timeout=30
    )


def sse_events(raw: bytes) -> list[Any]:
    return [e.data if e.is_done else e.json() for e in SSEParser().feed(raw)]


def accumulate(raw: bytes) -> StreamAccumulator:
    acc = StreamAccumulator()
    acc.feed_bytes(raw)
    acc.close()
    return acc


def words(text: str) -> int:
    return len(text.split())  # the fake counts words as tokens


# -- (a) non-stream -----------------------------------------------------------------------------
def test_non_stream_answer_is_a_chat_completion_with_usage_and_cost(messages: MessagesStack) -> None:
    raw = client(messages).chat.completions.with_raw_response.create(
        model="claude", messages=[SYSTEM, {"role": "user", "content": "hello there"}]
    )
    completion = raw.parse()
    assert raw.headers["x-selected-model"] == "claude"
    assert completion.object == "chat.completion" and completion.model == "claude"
    reply = "[claude] model=claude-test-1 echo: hello there"
    assert completion.choices[0].message.content == reply
    assert completion.choices[0].finish_reason == "stop"
    prompt = words("Be brief.") + words("hello there")
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (prompt, words(reply))
    meta = completion.model_extra["routing_metadata"]
    assert meta["selected_model"] == "claude"
    assert meta["cost"] == pytest.approx(prompt * 1 + words(reply) * 2)  # pricing: 1 and 2 per token
    # What the messages upstream saw: its own path, body shape and credentials.
    (seen,) = messages.m.requests
    assert seen.path == "/v1/messages"
    assert seen.body["system"] == "Be brief."  # hoisted out of the messages
    assert seen.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    assert seen.body["model"] == "claude-test-1" and seen.body["max_tokens"] == 4096
    assert "stream_options" not in seen.body and "stream" not in seen.body
    assert seen.headers["x-api-key"] == MESSAGES_KEY  # the literal api_key, as x-api-key
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers  # the client's own credentials are not forwarded
    assert seen.headers["x-selected-model"] == "claude"


def test_key_from_the_environment_and_chat_models_keep_bearer_auth(messages: MessagesStack) -> None:
    out = client(messages).chat.completions.create(
        model="claude-env", messages=[{"role": "user", "content": "hi"}]
    )
    assert out.choices[0].message.content == "[claude] model=claude-test-2 echo: hi"
    seen = messages.m.last_request
    assert seen.headers["x-api-key"] == MESSAGES_KEY and seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    # A chat-format model: its literal key as a bearer token, replacing the client's; no x-api-key.
    chat = client(messages).chat.completions.create(model="gpt", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content
    seen = messages.gpt.last_request
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert "x-api-key" not in seen.headers and "anthropic-version" not in seen.headers


def test_tool_call_round_trip(messages: MessagesStack) -> None:
    ask = [{"role": "user", "content": "What's the weather in New York?"}]
    first = client(messages).chat.completions.create(model="claude", messages=ask, tools=[WEATHER_TOOL])
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"location": "New York", "unit": "celsius"}
    assert messages.m.last_request.body["tools"][0]["input_schema"]["required"] == ["location"]
    follow = [
        *ask,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "21C and sunny"},
    ]
    second = client(messages).chat.completions.create(model="claude", messages=follow, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "[claude] tool result: 21C and sunny"
    turns = messages.m.last_request.body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][-1]["type"] == "tool_use" and turns[2]["content"][0]["type"] == "tool_result"
    assert messages.m.rejected == 0


def test_upstream_error_status_is_relayed_in_chat_shape(messages: MessagesStack) -> None:
    messages.m.configure(fail_status=429)
    with pytest.raises(openai.RateLimitError) as info:
        client(messages).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body == {"message": "claude failing with 429", "type": "rate_limit_error", "code": None}


# -- (b) streams ---------------------------------------------------------------------------------
def test_stream_is_chat_chunks_with_tool_call_deltas_and_finish_reason(messages: MessagesStack) -> None:
    stream = client(messages).chat.completions.create(
        model="claude",
        stream=True,
        tools=[WEATHER_TOOL],
        messages=[SYSTEM, {"role": "user", "content": "weather in Rome please"}],
    )
    chunks = list(stream)
    assert chunks and {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.model for c in chunks} == {"claude"}
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == "Let me check the weather."
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert len(calls) >= 3  # the opening delta (id, name), then argument pieces
    assert calls[0].index == 0 and calls[0].id.startswith("toolu_")
    assert calls[0].function.name == "get_weather" and calls[0].function.arguments == ""
    assert all(tc.index == 0 for tc in calls)
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {
        "location": "Rome",
        "unit": "celsius",
    }
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens == words("Be brief.") + words("weather in Rome please")
    seen = messages.m.last_request
    assert seen.body["stream"] is True and "stream_options" not in seen.body
    assert seen.body["system"] == "Be brief." and seen.headers["x-api-key"] == MESSAGES_KEY


def test_stream_wire_format_never_leaks(messages: MessagesStack) -> None:
    with httpx.stream(
        "POST",
        f"{messages.v1}/chat/completions",
        timeout=30,
        json={
            "model": "claude",
            "stream": True,
            "messages": [{"role": "user", "content": "one two three four"}],
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-selected-model"] == "claude"
        raw = response.read()
    assert b"event:" not in raw and b"content_block" not in raw and b"message_start" not in raw
    assert raw.endswith(b"data: [DONE]\n\n")
    acc = accumulate(raw)
    assert acc.completed and acc.content == "[claude] model=claude-test-1 echo: one two three four"
    assert acc.finish_reason == "stop"


def test_only_finished_streams_are_cached(messages: MessagesStack) -> None:
    finished_q = "cachemsg: describe the water cycle of the amazon rainforest"
    streamed = client(messages).chat.completions.create(
        model="MoM", stream=True, messages=[{"role": "user", "content": finished_q}]
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text.endswith(finished_q)
    messages.drain()  # complete() ran: a finished stream is written to the cache
    before = len(messages.m.requests)
    hit = client(messages).chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": finished_q}]
    )
    assert len(messages.m.requests) == before and hit.headers["x-cache-status"] == "hit"
    assert hit.parse().choices[0].message.content == text

    # A stream cut short (no stop_reason): the client gets an error chunk and [DONE]; nothing cached.
    cut_q = "cachemsg: list prime numbers between ninety and one hundred twenty"
    messages.m.configure(end_after_events=5)
    cut = post(messages, {"model": "MoM", "stream": True, "messages": [{"role": "user", "content": cut_q}]})
    events = sse_events(cut.content)
    assert events[-1] == "[DONE]" and events[-2]["error"]["type"] == "upstream_error"
    # ... and an error event mid-stream: the same.
    error_q = "cachemsg: explain how volcanoes form islands in the pacific"
    messages.m.configure(end_after_events=None, stream_error_after_events=4)
    errored = post(
        messages, {"model": "MoM", "stream": True, "messages": [{"role": "user", "content": error_q}]}
    )
    events = sse_events(errored.content)
    assert events[-1] == "[DONE]" and events[-2]["error"]["type"] == "overloaded_error"
    messages.drain()
    messages.m.configure(stream_error_after_events=None)
    for question in (cut_q, error_q):
        before = len(messages.m.requests)
        again = client(messages).chat.completions.with_raw_response.create(
            model="MoM", messages=[{"role": "user", "content": question}]
        )
        assert len(messages.m.requests) == before + 1, question  # not answered from the cache
        assert again.headers["x-cache-status"] == "miss"
        assert again.parse().choices[0].message.content.endswith(question)


# -- (c) the Responses API front door ------------------------------------------------------------
def test_responses_api_to_a_messages_model(messages: MessagesStack) -> None:
    response = client(messages).responses.create(
        model="claude", instructions="Be brief.", input="hello there"
    )
    assert response.object == "response" and response.status == "completed"
    assert response.output_text == "[claude] model=claude-test-1 echo: hello there"
    assert response.usage is not None and response.usage.input_tokens == words("Be brief. hello there")
    seen = messages.m.last_request
    assert seen.path == "/v1/messages" and seen.body["system"] == "Be brief."
    assert seen.headers["x-api-key"] == MESSAGES_KEY

    events = list(client(messages).responses.create(model="claude", input="stream me please", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "[claude] model=claude-test-1 echo: stream me please"
    assert events[-1].response.output_text == text


def test_responses_api_tool_call_stream(messages: MessagesStack) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["function"]["parameters"]}
    events = list(
        client(messages).responses.create(model="claude", input="weather in Oslo?", tools=[tool], stream=True)
    )  # type: ignore[list-item]
    done = events[-1]
    assert done.type == "response.completed"
    calls = [item for item in done.response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"location": "Oslo", "unit": "celsius"}
    assert any(e.type == "response.function_call_arguments.delta" for e in events)


# -- (d) what cannot be translated ---------------------------------------------------------------
def test_untranslatable_request_is_a_400_and_nothing_is_sent(messages: MessagesStack) -> None:
    body = {"model": "claude", "n": 2, "messages": [{"role": "user", "content": "hi"}]}
    for ask in (body, {**body, "stream": True}):
        refused = post(messages, ask)
        assert refused.status_code == 400
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.headers["x-selected-model"] == "claude"
        error = refused.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "unsupported_for_upstream_format"
        assert "n > 1" in error["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client(messages).chat.completions.create(
            model="claude",
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_object"},
        )
    assert info.value.code == "unsupported_for_upstream_format"
    responses = post(
        messages,
        {"model": "claude", "input": "hi", "text": {"format": {"type": "json_object"}}},
        "/responses",
    )
    assert responses.status_code == 400
    assert responses.json()["error"]["code"] == "unsupported_for_upstream_format"
    assert messages.m.requests == []  # nothing reached the upstream
    ok = client(messages).chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}]
    )
    assert ok.choices[0].message.content == "[claude] model=claude-test-1 echo: hi"


@pytest.mark.parametrize(
    "answer, content_type",
    [
        ('{"type": "message", "content": "not a list of blocks"}', "application/json"),
        ('{"type": "error", "error": {"type": 5}}', "application/json"),
        ("<html>upstream proxy page</html>", "text/html"),
    ],
)
def test_untranslatable_answer_is_a_502(messages: MessagesStack, answer: str, content_type: str) -> None:
    messages.m.configure(answer_body=answer, answer_content_type=content_type)
    bad = post(messages, {"model": "claude", "messages": [{"role": "user", "content": "hi"}]})
    assert bad.status_code == 502, bad.text
    assert bad.headers["content-type"].startswith("application/json")
    assert bad.headers["x-selected-model"] == "claude"
    error = bad.json()["error"]
    assert error["type"] == "upstream_error" and error["message"]
    assert "upstream proxy page" not in bad.text
    with pytest.raises(openai.APIStatusError) as info:
        client(messages).responses.create(model="claude", input="hi")
    assert info.value.status_code == 502
    messages.m.configure(answer_body=None)
    ok = client(messages).chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}]
    )
    assert ok.choices[0].message.content == "[claude] model=claude-test-1 echo: hi"


@pytest.mark.parametrize(
    "stream_body, message",
    [
        # an error event the translator cannot read
        (
            'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", "usage": {}}}\n\n'
            'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
            '"delta": {"type": "text_delta", "text": "partial"}}\n\n'
            'event: error\ndata: {"type": "error", "error": {"type": 5}}\n\n'
            'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
            '"delta": {"type": "text_delta", "text": " never shown"}}\n\n',
            "cannot translate",
        ),
        # not an event stream at all
        ("this is not an event stream\n\nat all\n\n", "ended before its stop_reason"),
    ],
)
def test_untranslatable_stream_ends_cleanly(messages: MessagesStack, stream_body: str, message: str) -> None:
    messages.m.configure(stream_body=stream_body)
    with httpx.stream(
        "POST",
        f"{messages.v1}/chat/completions",
        timeout=30,
        json={"model": "claude", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ) as response:
        assert response.status_code == 200
        raw = response.read()  # returns: the stream ends, it does not hang
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "upstream_error" and message in events[-2]["error"]["message"]
    assert b"never shown" not in raw and b"event:" not in raw and b"not an event stream" not in raw
    # The Responses API gets a failed response, then the bridge keeps serving.
    events = list(client(messages).responses.create(model="claude", input="hi", stream=True))
    assert events[-1].type in ("response.failed", "error")
    messages.m.configure(stream_body=None)
    ok = list(
        client(messages).chat.completions.create(
            model="claude", stream=True, messages=[{"role": "user", "content": "still there?"}]
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in ok if c.choices).endswith("still there?")
