"""Chat <-> messages-style translation: requests, answers, error bodies and event streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.upstream.messages_api import MessagesTranslationError, messages_to_chat
from app.upstream.messages_request import DEFAULT_MAX_TOKENS, chat_to_messages
from app.upstream.messages_stream import MessagesStreamTranslator
from app.upstream.sse import SSEParser, StreamAccumulator
from app.upstream.targets import SUPPORTED_API_FORMATS, UpstreamTarget
from app.upstream.wire import wire_for
from tests.fakes.messages_upstream import FakeMessagesUpstream, InvalidRequest, validate_request

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
TIME_TOOL = {"type": "function", "function": {"name": "get_time"}}  # no parameters at all


def conversation() -> list[dict[str, Any]]:
    """A realistic tool loop: parallel calls, their results, then a follow-up question."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "14:05"}]},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
    ]


# -- request: chat -> messages ---------------------------------------------------------------
def test_plain_request_maps_every_parameter():
    body = {
        "model": "MoM",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_completion_tokens": 64,
        "max_tokens": 999,
        "temperature": 1.7,
        "top_p": 0.9,
        "stop": "END",
        "user": "u-42",
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 7,
        "presence_penalty": 0.5,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    out = chat_to_messages(body, "claude-x")
    assert out == {
        "model": "claude-x",
        "max_tokens": 64,  # max_completion_tokens wins over the deprecated max_tokens
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "system": "Be brief.",
        "stop_sequences": ["END"],
        "temperature": 1.0,  # clamped into the messages range
        "top_p": 0.9,
        "stream": True,
        "metadata": {"user_id": "u-42"},
    }
    validate_request(out)


def test_defaults_and_stop_list():
    out = chat_to_messages({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "", "b"]}, "m")
    assert out["max_tokens"] == DEFAULT_MAX_TOKENS
    assert out["stop_sequences"] == ["a", "b"]
    assert "stream" not in out and "system" not in out
    assert (
        chat_to_messages({"messages": [{"role": "user", "content": "x"}]}, "m", default_max_tokens=12)[
            "max_tokens"
        ]
        == 12
    )


def test_tool_loop_translates_to_a_valid_messages_conversation():
    body = {
        "model": "MoM",
        "messages": conversation(),
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "tool_choice": "auto",
    }
    out = chat_to_messages(body, "claude-x")
    validate_request(out)  # the fake upstream's strict, independent checks
    assert out["system"] == "You are terse.\n\nAnswer in French."
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assistant = out["messages"][1]["content"]
    assert assistant[0] == {"type": "text", "text": "Checking both."}
    assert assistant[1] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {"location": "Paris"},
    }
    assert assistant[2] == {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}
    results = out["messages"][2]["content"]
    # Both tool results and the follow-up question share one user turn, results first.
    assert results[0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, cloudy"}
    assert results[1] == {
        "type": "tool_result",
        "tool_use_id": "call_2",
        "content": [{"type": "text", "text": "14:05"}],
    }
    assert results[2] == {"type": "text", "text": "And tomorrow?"}
    assert out["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
        },
        {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert out["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize(
    "choice, parallel, expected",
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ({"type": "function", "function": {"name": "get_time"}}, None, {"type": "tool", "name": "get_time"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_tool_choice_mapping(choice, parallel, expected):
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "x"}],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    }
    if choice is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    out = chat_to_messages(body, "m")
    assert out.get("tool_choice") == expected
    validate_request(out)


def test_tool_choice_without_tools_is_left_out():
    out = chat_to_messages({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}, "m")
    assert "tool_choice" not in out and "tools" not in out
    validate_request(out)


def test_content_parts_images_and_documents():
    parts = [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0x", "filename": "a.pdf"}},
    ]
    out = chat_to_messages({"messages": [{"role": "user", "content": parts}]}, "m")
    blocks = out["messages"][0]["content"]
    assert blocks[0] == {"type": "text", "text": "What is in these?"}
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert blocks[2] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
    assert blocks[3]["source"] == {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}
    validate_request(out)


def test_empty_assistant_turn_is_dropped_and_turns_merge():
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "two"},
    ]
    out = chat_to_messages({"messages": messages}, "m")
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}
    ]
    validate_request(out)


def test_chat_shaped_body_is_refused_by_the_fake():
    # The fake must catch an untranslated chat body, or the tests above would prove nothing.
    with pytest.raises(InvalidRequest):
        validate_request({"model": "m", "max_tokens": 5, "messages": conversation()})
    with pytest.raises(InvalidRequest):
        validate_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})


def _with(**changes: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "x"}], **changes}


def _assistant_call(arguments: Any) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}]}


@pytest.mark.parametrize(
    "body, fragment",
    [
        (_assistant_call('{"city": "Par'), "not valid JSON"),
        (_assistant_call("[1, 2]"), "must be a JSON object"),
        (_with(n=2), "n > 1"),
        (_with(response_format={"type": "json_schema", "json_schema": {}}), "response_format"),
        (_with(functions=[{"name": "f"}]), "legacy"),
        (_with(max_tokens=0), "max_tokens"),
        (_with(max_completion_tokens="10"), "max_completion_tokens"),
        (_with(stop=5), "stop"),
        (_with(temperature="hot"), "temperature"),
        (_with(tools=[{"type": "code_interpreter"}]), "function tools"),
        (_with(tools=[WEATHER_TOOL], tool_choice={"type": "allowed_tools"}), "tool_choice"),
        ({"messages": []}, "non-empty"),
        ({"messages": [{"role": "system", "content": "only a system prompt"}]}, "at least one user"),
        ({"messages": [{"role": "critic", "content": "x"}]}, "role"),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "legacy role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}
                ]
            },
            "input_audio",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}
                ]
            },
            "URL",
        ),
        ({"messages": [{"role": "system", "content": [{"type": "image_url"}]}]}, "only text"),
        ({"messages": "hello"}, "non-empty array"),
    ],
)
def test_untranslatable_requests_raise_a_400_error(body, fragment):
    with pytest.raises(MessagesTranslationError, match=fragment) as info:
        chat_to_messages(body, "m")
    assert info.value.status == 400
    assert isinstance(info.value, ValueError)


# -- response: messages -> chat ---------------------------------------------------------------
def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def test_text_and_tool_use_answer_becomes_a_chat_completion():
    resp = message(
        [
            {"type": "text", "text": "Let me "},
            {"type": "text", "text": "check."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"location": "Zürich", "days": 2},
            },
        ],
        "tool_use",
        cache_read_input_tokens=100,
        cache_creation_input_tokens=20,
    )
    chat = messages_to_chat(resp, "claude")
    assert chat["object"] == "chat.completion" and chat["model"] == "claude"
    assert chat["id"].startswith("chatcmpl-")
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check."
    (call,) = choice["message"]["tool_calls"]
    assert (
        call["id"] == "toolu_1" and call["type"] == "function" and call["function"]["name"] == "get_weather"
    )
    assert json.loads(call["function"]["arguments"]) == {"location": "Zürich", "days": 2}
    # OpenAI convention: cached (read and written) tokens are part of prompt_tokens.
    assert chat["usage"] == {
        "prompt_tokens": 130,
        "completion_tokens": 5,
        "total_tokens": 135,
        "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 20},
    }


def test_tool_only_answer_has_null_content_and_thinking_becomes_reasoning():
    resp = message(
        [
            {"type": "thinking", "thinking": "User wants weather.", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}},
        ],
        "tool_use",
    )
    msg = messages_to_chat(resp, "m")["choices"][0]["message"]
    assert msg["content"] is None
    assert msg["reasoning_content"] == "User wants weather."
    assert msg["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    "stop_reason, finish",
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_stop_reason_mapping(stop_reason, finish):
    chat = messages_to_chat(message([{"type": "text", "text": "x"}], stop_reason), "m")
    assert chat["choices"][0]["finish_reason"] == finish
    assert chat["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_error_body_becomes_an_openai_error():
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert messages_to_chat(body, "m") == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "code": None}
    }


def test_malformed_message_is_a_502_and_foreign_json_passes_through():
    with pytest.raises(MessagesTranslationError) as info:
        messages_to_chat({"type": "message", "content": "not a list"}, "m")
    assert info.value.status == 502
    assert messages_to_chat({"detail": "gateway says no"}, "m") == {"detail": "gateway says no"}


# -- streaming ----------------------------------------------------------------------------------
def sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def text_stream() -> bytes:
    # The documented sequence of a short text answer (with a multi-byte character).
    start = message([], "end_turn")
    start.update(content=[], stop_reason=None)
    start["usage"] = {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 8}
    return sse(
        [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            ("ping", {"type": "ping"}),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Héllo"}},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": " wörld!"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 15},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def tool_stream(first_text: bool = True) -> bytes:
    fake = FakeMessagesUpstream()
    blocks = [{"type": "text", "text": "Checking two cities."}] if first_text else []
    blocks += [
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"location": "Paris"}},
        {
            "type": "tool_use",
            "id": "toolu_b",
            "name": "get_weather",
            "input": {"location": "New York", "unit": "f"},
        },
    ]
    return sse(fake.events(message(blocks, "tool_use")))


def run(raw: bytes, pieces: list[int] | None = None, **kw: Any) -> bytes:
    translator = MessagesStreamTranslator("claude", **kw)
    cuts = [0, *(pieces or []), len(raw)]
    out = b"".join(translator.feed(raw[a:b]) for a, b in zip(cuts, cuts[1:], strict=False))
    return out + translator.finish()


def accumulate(out: bytes) -> StreamAccumulator:
    acc = StreamAccumulator()
    acc.feed_bytes(out)
    acc.close()
    return acc


def chunks(out: bytes) -> list[Any]:
    return [e.data if e.is_done else e.json() for e in SSEParser().feed(out)]


def test_text_stream_translates_to_chat_chunks():
    out = run(text_stream())
    events = chunks(out)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[0]["object"] == "chat.completion.chunk" and events[0]["model"] == "claude"
    assert events[0]["id"] == "chatcmpl-msg_01"
    assert [e["choices"][0]["delta"].get("content") for e in events[1:3]] == ["Héllo", " wörld!"]
    assert events[3]["choices"][0]["finish_reason"] == "stop"
    assert events[4]["choices"] == []
    assert events[4]["usage"] == {
        "prompt_tokens": 33,
        "completion_tokens": 15,
        "total_tokens": 48,
        "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
    }
    assert events[-1] == "[DONE]" and len(events) == 6
    acc = accumulate(out)
    assert acc.completed and acc.content == "Héllo wörld!" and acc.finish_reason == "stop"


def test_frames_split_at_every_byte_boundary_give_the_same_output():
    def timeless(out: bytes) -> list[Any]:  # `created` is the clock's second: runs may straddle one
        return [e if e == "[DONE]" else {k: v for k, v in e.items() if k != "created"} for e in chunks(out)]

    raw = text_stream()
    whole = timeless(run(raw))
    for cut in range(1, len(raw)):
        assert timeless(run(raw, [cut])) == whole, f"split at byte {cut}"
    # and one byte at a time (multi-byte characters split too)
    assert timeless(run(raw, list(range(1, len(raw))))) == whole


def test_tool_call_deltas_rebuild_both_calls():
    raw = tool_stream()
    out = run(raw, list(range(7, len(raw), 13)))
    acc = accumulate(out)
    assert acc.content == "Checking two cities."
    assert acc.finish_reason == "tool_calls"
    calls = acc.tool_calls
    assert [c["id"] for c in calls] == ["toolu_a", "toolu_b"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"location": "Paris"}
    assert json.loads(calls[1]["function"]["arguments"]) == {"location": "New York", "unit": "f"}
    # tool_calls indexes count tool calls, not content blocks (the text block is block 0)
    starts = [e for e in chunks(out)[:-1] if e["choices"] and e["choices"][0]["delta"].get("tool_calls")]
    assert {e["choices"][0]["delta"]["tool_calls"][0]["index"] for e in starts} == {0, 1}
    first = next(e["choices"][0]["delta"]["tool_calls"][0] for e in starts)
    assert first == {
        "index": 0,
        "id": "toolu_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }


def test_usage_chunk_only_when_asked():
    events = chunks(run(text_stream(), include_usage=False))
    assert all("usage" not in e for e in events[:-1]) and events[-1] == "[DONE]"


def test_request_id_names_the_chunks():
    events = chunks(run(text_stream(), request_id="chatcmpl-req7"))
    assert {e["id"] for e in events[:-1]} == {"chatcmpl-req7"}


def test_error_event_becomes_an_error_chunk_then_done():
    raw = text_stream()
    cut = raw.index(b"event: content_block_stop")
    error = sse(
        [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
    )
    translator = MessagesStreamTranslator("claude")
    out = translator.feed(raw[:cut] + error) + translator.feed(raw[cut:]) + translator.finish()
    events = chunks(out)
    assert events[-2] == {"error": {"message": "Overloaded", "type": "overloaded_error", "code": None}}
    assert events[-1] == "[DONE]"
    assert not any(e != "[DONE]" and e.get("choices") and e["choices"][0]["finish_reason"] for e in events)
    acc = accumulate(out)
    assert acc.error["type"] == "overloaded_error" and not acc.completed


def test_truncated_stream_ends_with_an_error():
    raw = text_stream()
    out = run(raw[: raw.index(b"event: message_delta")])
    events = chunks(out)
    assert events[-2]["error"]["type"] == "upstream_error" and events[-1] == "[DONE]"
    assert not accumulate(out).completed


def test_stream_without_message_stop_but_with_stop_reason_is_complete():
    raw = text_stream()
    out = run(raw[: raw.index(b"event: message_stop")])
    events = chunks(out)
    assert events[-2]["usage"]["completion_tokens"] == 15 and events[-1] == "[DONE]"
    assert accumulate(out).completed


def test_nothing_after_done_and_noise_is_ignored():
    translator = MessagesStreamTranslator("claude")
    noise = b': comment\n\nevent: ping\ndata: {"type": "ping"}\n\ndata: not json\n\n'
    assert translator.feed(noise) == b""
    out = translator.feed(text_stream())
    assert out.endswith(b"data: [DONE]\n\n")
    assert translator.feed(text_stream()) == b"" and translator.finish() == b""


# -- targets ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "base_url, chat_path, expected",
    [
        ("https://api.anthropic.com", None, "https://api.anthropic.com/v1/messages"),
        ("http://h:8000/v1", None, "http://h:8000/v1/messages"),
        ("http://h:8000/proxy/anthropic/v1/", None, "http://h:8000/proxy/anthropic/v1/messages"),
        ("http://h:8000", "/custom/messages?beta=true", "http://h:8000/custom/messages?beta=true"),
        ("http://h:8000", "https://other/v1/messages", "https://other/v1/messages"),
    ],
)
def test_messages_url_rules(base_url, chat_path, expected):
    target = UpstreamTarget(model="c", base_url=base_url, chat_path=chat_path, api_format="anthropic")
    assert target.messages_url == expected and wire_for(target).url(target) == expected


@pytest.mark.parametrize("api_format", ["anthropic", "Anthropic", " MESSAGES ", "messages"])
def test_messages_formats_are_case_insensitive(api_format):
    target = UpstreamTarget(model="c", base_url="http://h", api_format=api_format)
    assert target.wire_format == "messages" and target.api_format in SUPPORTED_API_FORMATS
    assert UpstreamTarget(model="c", base_url="http://h").wire_format == "chat"


def test_messages_auth_headers(monkeypatch):
    monkeypatch.setenv("MSG_KEY", "sk-ant-1")
    keyed = UpstreamTarget(model="c", base_url="http://h", api_format="anthropic", api_key_env="MSG_KEY")
    assert wire_for(keyed).request_headers(keyed) == {
        "anthropic-version": "2023-06-01",
        "x-api-key": "sk-ant-1",
    }
    unkeyed = keyed.model_copy(update={"api_key_env": None})
    assert wire_for(unkeyed).request_headers(unkeyed) == {}
    chat = UpstreamTarget(model="c", base_url="http://h", api_key_env="MSG_KEY")
    assert chat.auth_headers() == {"Authorization": "Bearer sk-ant-1"}


# -- translation failures and `completed` ---------------------------------------------------------
def test_completed_only_for_a_whole_answer():
    raw = text_stream()
    whole = MessagesStreamTranslator("claude")
    whole.feed(raw)
    assert whole.done and whole.completed  # message_stop
    no_stop = MessagesStreamTranslator("claude")
    no_stop.feed(raw[: raw.index(b"event: message_stop")])
    assert not no_stop.done and not no_stop.completed  # not ended yet
    no_stop.finish()
    assert no_stop.completed  # its stop_reason came before the body ended
    cut = MessagesStreamTranslator("claude")
    cut.feed(raw[: raw.index(b"event: message_delta")])
    cut.finish()
    assert cut.done and not cut.completed
    errored = MessagesStreamTranslator("claude")
    errored.feed(sse([("error", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}})]))
    assert errored.done and not errored.completed


def test_untranslatable_stream_event_ends_the_stream_cleanly():
    raw = text_stream()
    cut = raw.index(b"event: content_block_stop")
    bad = sse([("error", {"type": "error", "error": {"type": 5}})])  # not a readable error
    translator = MessagesStreamTranslator("claude")
    out = translator.feed(raw[:cut] + bad + raw[cut:]) + translator.finish()
    events = chunks(out)
    assert events[-1] == "[DONE]" and events[-2]["error"]["type"] == "upstream_error"
    assert "ValidationError" in events[-2]["error"]["message"]
    acc = accumulate(out)
    assert acc.content == "Héllo wörld!" and not acc.completed  # what came before is kept
    assert translator.done and not translator.completed


def test_oversized_event_and_fail_end_the_stream_cleanly():
    translator = MessagesStreamTranslator("claude")
    translator._parser = SSEParser(max_event_bytes=64)
    out = translator.feed(b"data: " + b"x" * 200)
    events = chunks(out)
    assert events[-1] == "[DONE]" and "cannot read the messages stream" in events[-2]["error"]["message"]
    assert translator.feed(text_stream()) == b"" and translator.finish() == b"" and not translator.completed
    cut_short = MessagesStreamTranslator("claude")
    out = cut_short.feed(text_stream()[:40]) + cut_short.fail("client went away")
    assert chunks(out)[-2] == {
        "error": {"message": "client went away", "type": "upstream_error", "code": None}
    }
    assert cut_short.fail("again") == b"" and not cut_short.completed


def test_malformed_error_body_is_a_502():
    with pytest.raises(MessagesTranslationError) as info:
        messages_to_chat({"type": "error", "error": {"type": 5}}, "m")
    assert info.value.status == 502


def test_translation_error_bodies():
    assert MessagesTranslationError("n > 1").body() == {
        "error": {
            "message": "n > 1",
            "type": "invalid_request_error",
            "code": "unsupported_for_upstream_format",
        }
    }
    assert MessagesTranslationError("bad answer", 502).body() == {
        "error": {"message": "bad answer", "type": "upstream_error", "code": None}
    }
