"""SSE parsing, chat-stream accumulation, encoding and replay."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from app.upstream.sse import (
    SSEError,
    SSEEvent,
    SSEParser,
    StreamAccumulator,
    encode_done,
    encode_sse,
    replay_as_sse,
)


def chunk(delta: dict, finish: str | None = None, index: int = 0, **extra) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m1",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def parse_all(data: bytes, split_at: list[int]) -> list[SSEEvent]:
    parser = SSEParser()
    events, start = [], 0
    for cut in sorted(split_at) + [len(data)]:
        events += parser.feed(data[start:cut])
        start = cut
    return events + parser.close()


# -- parser -------------------------------------------------------------------------------
def test_parser_handles_fields_comments_and_multiline_data():
    stream = (
        b": keep-alive comment\n"
        b"event: update\nid: 7\nretry: 1500\ndata: line one\ndata: line two\n\n"
        b"data:no-space\n\n"
        b"data: [DONE]\n\n"
    )
    parser = SSEParser()
    events = parser.feed(stream)
    assert events[0] == SSEEvent("line one\nline two", "update", "7", 1500)
    assert events[1].data == "no-space" and events[1].event is None
    assert events[2].is_done and not events[0].is_done
    assert parser.comments == 1


def test_parser_reassembles_frames_split_anywhere():
    frames = encode_sse({"text": "héllo wörld ✓"}) + encode_sse({"n": 2}) + encode_done()
    expected = [json.loads(e.data) for e in SSEParser().feed(frames) if not e.is_done]
    for cut in range(1, len(frames)):
        events = parse_all(frames, [cut])
        assert [json.loads(e.data) for e in events if not e.is_done] == expected
        assert events[-1].is_done


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=400), max_size=8), st.sampled_from([b"\n", b"\r\n", b"\r"])
)
def test_parser_is_split_and_line_ending_invariant(cuts, newline):
    payloads = [{"i": i, "s": "ü" * i} for i in range(5)]
    data = b"".join(b"data: " + json.dumps(p, ensure_ascii=False).encode() + newline * 2 for p in payloads)
    events = parse_all(data, [c % (len(data) + 1) for c in cuts])
    assert [json.loads(e.data) for e in events] == payloads


def test_crlf_split_between_cr_and_lf_is_one_line_break():
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == []
    events = parser.feed(b"\ndata: b\r\n\r\n")
    assert [e.data for e in events] == ["a", "b"]


def test_event_without_trailing_blank_line_is_flushed_on_close():
    parser = SSEParser()
    assert parser.feed(b"data: tail") == []
    assert [e.data for e in parser.close()] == ["tail"]


def test_event_without_data_is_not_dispatched():
    assert SSEParser().feed(b"event: ping\n\n: comment\n\n") == []


def test_oversized_event_is_refused():
    parser = SSEParser(max_event_bytes=64)
    with pytest.raises(SSEError):
        parser.feed(b"data: " + b"x" * 100)


def test_encode_sse_shapes():
    assert encode_sse({"a": 1}) == b'data: {"a":1}\n\n'
    assert encode_sse("x\ny", event="e") == b"event: e\ndata: x\ndata: y\n\n"
    assert encode_done() == b"data: [DONE]\n\n"


# -- accumulator --------------------------------------------------------------------------
def test_accumulator_rebuilds_content_usage_and_first_token_time():
    ticks = iter([10.0, 10.5, 11.0, 12.0])
    acc = StreamAccumulator(clock=lambda: next(ticks))
    frames = [
        encode_sse(chunk({"role": "assistant", "content": ""})),
        encode_sse(chunk({"content": "Hel"})),
        encode_sse(chunk({"content": "lo"})),
        encode_sse(chunk({}, "stop")),
        encode_sse(
            {
                **chunk({}),
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
        ),
        encode_done(),
    ]
    data = b"".join(frames)
    for i in range(0, len(data), 7):  # arbitrary network chunking
        acc.feed_bytes(data[i : i + 7])
    assert acc.content == "Hello" and acc.finish_reason == "stop"
    assert acc.usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert acc.chunk_count == 5 and acc.done and acc.completed
    assert acc.first_token_at == 10.5 and acc.ttft_s == pytest.approx(0.5)
    completion = acc.to_chat_completion()
    ChatCompletion.model_validate(completion)
    assert completion["object"] == "chat.completion" and completion["model"] == "m1"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}


def test_accumulator_merges_tool_call_deltas():
    acc = StreamAccumulator()
    acc.add_chunk(chunk({"role": "assistant"}))
    acc.add_chunk(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        )
    )
    acc.add_chunk(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ]
            }
        )
    )
    acc.add_chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}))
    acc.add_chunk(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": '"Oslo"}'}}]})
    )
    acc.add_chunk(chunk({}, "tool_calls"))
    calls = acc.tool_calls
    assert [c["id"] for c in calls] == ["call_1", "call_2"]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    message = acc.to_chat_completion()["choices"][0]["message"]
    assert message["content"] is None and len(message["tool_calls"]) == 2
    ChatCompletion.model_validate(acc.to_chat_completion())


def test_accumulator_keeps_choices_reasoning_and_errors_apart():
    acc = StreamAccumulator()
    acc.add_chunk(chunk({"reasoning_content": "think "}))
    acc.add_chunk(chunk({"content": "A"}, index=0))
    acc.add_chunk(chunk({"content": "B"}, index=1))
    assert acc.reasoning_content == "think " and acc.content == "A"
    choices = acc.to_chat_completion()["choices"]
    assert [c["message"]["content"] for c in choices] == ["A", "B"]
    assert choices[0]["message"]["reasoning_content"] == "think "
    assert not acc.completed  # no finish_reason, no [DONE]
    acc.add_event(SSEEvent('{"error": {"message": "overloaded"}}'))
    acc.add_event(SSEEvent("not json"))
    assert acc.error == {"message": "overloaded"} and acc.invalid_events == 1
    acc.add_event(SSEEvent("[DONE]"))
    assert not acc.completed  # an upstream error is never a complete answer


# -- replay -------------------------------------------------------------------------------
def completion(content: str = "The answer is 4, because 2+2=4.", **message_extra) -> dict:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1700000001,
        "model": "m2",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message_extra},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 11, "total_tokens": 20},
    }


@pytest.mark.parametrize("chunk_chars", [1, 5, 24, 1000])
def test_replay_round_trips_through_the_accumulator(chunk_chars):
    original = completion()
    frames = replay_as_sse(original, chunk_chars=chunk_chars)
    assert frames[-1] == encode_done()
    events = [e for f in frames for e in SSEParser().feed(f)]
    for event in events[:-1]:
        ChatCompletionChunk.model_validate(event.json())  # what SDK clients parse
    content_chunks = [
        e for e in events[:-1] if e.json()["choices"] and "content" in e.json()["choices"][0]["delta"]
    ]
    assert len(content_chunks) == 1 + -(-len(original["choices"][0]["message"]["content"]) // chunk_chars)
    acc = StreamAccumulator()
    for frame in frames:
        acc.feed_bytes(frame)
    rebuilt = acc.to_chat_completion()
    assert rebuilt["choices"] == [{**original["choices"][0], "logprobs": None}]
    assert rebuilt["usage"] == original["usage"] and rebuilt["id"] == "chatcmpl-x" and acc.done


def test_replay_includes_tool_calls_and_can_omit_usage():
    calls = [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]
    original = completion(content=None, tool_calls=calls)
    original["choices"][0]["finish_reason"] = "tool_calls"
    frames = replay_as_sse(original, include_usage=False)
    acc = StreamAccumulator()
    for frame in frames:
        acc.feed_bytes(frame)
    assert acc.tool_calls == calls and acc.finish_reason == "tool_calls"
    assert acc.usage is None


def test_replay_rejects_bad_chunk_size():
    with pytest.raises(ValueError):
        replay_as_sse(completion(), chunk_chars=0)
