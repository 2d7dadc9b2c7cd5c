"""Responses API <-> chat completions, checked against the official OpenAI SDK types."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

from app.exchange.client_api import ResponsesApi
from app.exchange.responses.answer import ChatToResponsesStream, chat_to_response
from app.exchange.responses.request import ResponsesInputError, ResponsesRequest, responses_to_chat
from app.pipeline.plan import ProviderState
from app.upstream.sse import SSEParser, encode_done, encode_sse, replay_as_sse

EVENTS = TypeAdapter(ResponseStreamEvent)


def chat_completion(content: str | None = "Four.", finish: str = "stop", **message_extra) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "qwen-small",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message_extra},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    }


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen-small",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def events_of(frames: list[bytes]) -> list[dict]:
    parser = SSEParser()
    out = [e for f in frames for e in parser.feed(f)]
    return [e.json() for e in out]


def translate(chat_frames: list[bytes], request: ResponsesRequest | None = None) -> list[dict]:
    stream = ChatToResponsesStream(request)
    out: list[bytes] = []
    for frame in chat_frames:
        out += stream.feed_bytes(frame)
    out += stream.finish()
    assert stream.finish() == []  # finishing twice sends nothing
    events = events_of(out)
    for event in events:
        EVENTS.validate_python(event)  # every event has the shape the SDK expects
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


# -- request translation ------------------------------------------------------------------
def test_string_input_becomes_system_and_user_messages():
    req = ResponsesRequest(
        model="MoM",
        input="What is 2+2?",
        instructions="Be brief.",
        max_output_tokens=50,
        temperature=0.2,
        stream=True,
        reasoning={"effort": "low"},
        seed=7,
    )
    body = responses_to_chat(req)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert body["model"] == "MoM" and body["max_tokens"] == 50 and body["temperature"] == 0.2
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "low" and body["seed"] == 7
    assert "input" not in body and "max_output_tokens" not in body


def test_item_list_with_parts_tools_and_tool_results():
    req = ResponsesRequest.model_validate(
        {
            "model": "auto",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Weather in Oslo and Rome?"},
                        {"type": "input_image", "image_url": "https://x/img.png", "detail": "low"},
                    ],
                },
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'},
                {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city":"Rome"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "12C"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "25C"}],
                },
                {"role": "assistant", "content": [{"type": "output_text", "text": "Oslo 12C, Rome 25C."}]},
            ],
            "tools": [
                {"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}}
            ],
            "tool_choice": {"type": "function", "name": "weather"},
            "parallel_tool_calls": True,
            "text": {
                "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}
            },
        }
    )
    body = responses_to_chat(req)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    user = body["messages"][1]["content"]
    assert user[0] == {"type": "text", "text": "Weather in Oslo and Rome?"}
    assert user[1] == {"type": "image_url", "image_url": {"url": "https://x/img.png", "detail": "low"}}
    assert [c["id"] for c in body["messages"][2]["tool_calls"]] == ["c1", "c2"]  # one turn, two calls
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "12C"}
    assert body["messages"][4]["content"] == "25C"
    assert body["messages"][5] == {"role": "assistant", "content": "Oslo 12C, Rome 25C."}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["parallel_tool_calls"] is True
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True},
    }


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0]"),
        # an object where a type name goes (found by the OpenAPI fuzzer: it was a 500)
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": {}}]}]}, "input[0]"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "hi", "text": {"format": {"type": "grammar"}}}, "text.format"),
        ({"input": []}, "at least one message"),
    ],
)
def test_untranslatable_requests_raise_clear_errors(changes, fragment):
    req = ResponsesRequest.model_validate({"model": "m", **changes})
    with pytest.raises(ResponsesInputError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        responses_to_chat(req)


def test_previous_messages_resolve_a_stored_conversation():
    req = ResponsesRequest(model="m", input="and then?", previous_response_id="resp_1")
    body = responses_to_chat(
        req, previous_messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    assert [m["content"] for m in body["messages"]] == ["hi", "hello", "and then?"]


def test_request_model_validation():
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate({"model": "m"})
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate({"model": "", "input": "x"})


# -- response translation -----------------------------------------------------------------
def test_chat_to_response_is_a_valid_sdk_response():
    req = ResponsesRequest(model="MoM", input="2+2?", instructions="brief", metadata={"k": "v"})
    data = chat_to_response(chat_completion(), req)
    response = Response.model_validate(data)
    assert data["id"].startswith("resp_") and data["object"] == "response" and data["status"] == "completed"
    assert response.output_text == data["output_text"] == "Four."
    assert response.model == "qwen-small" and response.instructions == "brief"
    message = data["output"][0]
    assert (
        message["type"] == "message" and message["id"].startswith("msg_") and message["status"] == "completed"
    )
    assert message["content"] == [{"type": "output_text", "text": "Four.", "annotations": [], "logprobs": []}]
    assert data["usage"]["input_tokens"] == 12 and data["usage"]["output_tokens"] == 3
    assert data["usage"]["total_tokens"] == 15 and data["usage"]["input_tokens_details"]["cached_tokens"] == 4


def test_tool_calls_reasoning_and_truncation_map_to_items():
    calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]
    data = chat_to_response(chat_completion(None, "tool_calls", tool_calls=calls, reasoning_content="hmm"))
    Response.model_validate(data)
    assert [item["type"] for item in data["output"]] == ["reasoning", "function_call"]
    call = data["output"][1]
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_1", "f", '{"a":1}')
    truncated = chat_to_response(chat_completion("Four", "length"))
    assert truncated["status"] == "incomplete"
    assert truncated["incomplete_details"] == {"reason": "max_output_tokens"}


# -- stream translation -------------------------------------------------------------------
def test_text_stream_event_sequence():
    frames = replay_as_sse(chat_completion("The answer is four."), chunk_chars=6)
    events = translate(frames, ResponsesRequest(model="MoM", input="2+2?"))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) == 4 and "".join(deltas) == "The answer is four."
    final = events[-1]["response"]
    assert final["id"] == events[0]["response"]["id"] and final["status"] == "completed"
    assert final["output"][0]["id"] == events[2]["item"]["id"]
    assert final["output_text"] == "The answer is four." and final["usage"]["output_tokens"] == 3


def test_tool_call_stream_events():
    frames = [
        encode_sse(chunk({"role": "assistant"})),
        encode_sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_7",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q":'},
                        }
                    ]
                }
            )
        ),
        encode_sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]})),
        encode_sse(chunk({}, "tool_calls")),
        encode_done(),
    ]
    events = translate(frames)
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" not in kinds
    assert kinds.count("response.function_call_arguments.delta") == 2
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == '{"q":"x"}'
    call = events[-1]["response"]["output"][0]
    assert (call["type"], call["call_id"], call["name"], call["arguments"]) == (
        "function_call",
        "call_7",
        "lookup",
        '{"q":"x"}',
    )


def test_upstream_error_mid_stream_fails_the_response():
    frames = [encode_sse(chunk({"content": "par"})), encode_sse({"error": {"message": "backend died"}})]
    events = translate(frames)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "backend died"}


def test_truncated_stream_ends_incomplete():
    events = translate(replay_as_sse(chat_completion("cut", "length")))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_empty_answer_still_has_one_message():
    events = translate([encode_sse(chunk({}, "stop")), encode_done()])
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["message"] and final["output_text"] == ""


# -- the official SDK end to end ----------------------------------------------------------
def responses_app(completion: dict) -> FastAPI:
    """What an ingress does: translate, call a 'backend' (canned), translate back."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request):
        req = ResponsesRequest.model_validate_json(await request.body())
        responses_to_chat(req)
        if not req.stream:
            return JSONResponse(chat_to_response(completion, req))
        translator = ChatToResponsesStream(req)

        async def frames():
            for frame in replay_as_sse(completion, chunk_chars=3):
                for out in translator.feed_bytes(frame):
                    yield out
            for out in translator.finish():
                yield out

        return StreamingResponse(frames(), media_type="text/event-stream")

    return app


@pytest.fixture
def sdk():
    transport = httpx.ASGITransport(app=responses_app(chat_completion("Two plus two is four.")))
    return openai.AsyncOpenAI(
        api_key="test", base_url="http://svc/v1", http_client=httpx.AsyncClient(transport=transport)
    )


async def test_sdk_parses_the_stream(sdk):
    stream = await sdk.responses.create(model="MoM", input="2+2?", stream=True)
    events = [event async for event in stream]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Two plus two is four."
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text


async def test_sdk_stream_helper_builds_the_final_response(sdk):
    async with sdk.responses.stream(model="MoM", input="2+2?") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == "Two plus two is four." and final.status == "completed"


async def test_sdk_parses_the_non_stream_object(sdk):
    response = await sdk.responses.create(model="MoM", input="2+2?")
    assert response.output_text == "Two plus two is four." and response.usage.total_tokens == 15


class _Records:
    """A ConversationStore in a dict (the Responses store as ResponsesApi sees it)."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    async def get(self, response_id: str) -> Any:
        return self.kept.get(response_id)

    async def put(self, record: Any) -> None:
        self.kept[record.id] = record


def test_a_continuation_is_tied_to_the_model_that_answered_and_its_reasoning():
    records = _Records()
    first = ResponsesApi(records)
    asyncio.run(first.prepare({"model": "MoM", "input": "fix the bug"}))
    first.parse({"model": "MoM", "input": "fix the bug"})
    assert first.tie is None  # nothing continued
    first.routed("code")
    message = {"role": "assistant", "content": "done", "reasoning_content": "thinking"}
    answer = first.render({"id": "c1", "model": "upstream-name", "choices": [{"message": message}]})
    asyncio.run(first.persist())
    # the Router's model is kept, not the upstream's own name for it
    follow = {"model": "MoM", "input": "and the tax?", "previous_response_id": answer["id"]}
    later = ResponsesApi(records)
    asyncio.run(later.prepare(follow))
    assert later.tie == ProviderState(model="code", reasoning=True)
    # no reasoning items: the plain provider-side tie
    plain = ResponsesApi(records)
    asyncio.run(plain.prepare({"model": "MoM", "input": "x"}))
    plain.parse({"model": "MoM", "input": "x"})
    plain.routed("finance")
    kept = plain.render(
        {"id": "c2", "model": "m", "choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    )
    asyncio.run(plain.persist())
    again = ResponsesApi(records)
    asyncio.run(again.prepare({"model": "MoM", "input": "y", "previous_response_id": kept["id"]}))
    assert again.tie == ProviderState(model="finance", reasoning=False)
