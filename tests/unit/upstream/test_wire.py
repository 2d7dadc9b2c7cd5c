"""The one chat <-> upstream-protocol translation (`app.upstream.wire`), without a network."""

from __future__ import annotations

import json

import pytest

from app.upstream.messages_api import UNSUPPORTED_CODE, MessagesTranslationError
from app.upstream.sse import SSEParser
from app.upstream.targets import UpstreamTarget
from app.upstream.wire import ChatPassthrough, ChatWire, MessagesWire, url_path, wire_for

CHAT = UpstreamTarget(
    model="gpt", provider_model_id="gpt-4o", base_url="http://h:8000/v1", extra_headers={"X-Team": "a"}
)
MESSAGES = UpstreamTarget(
    model="claude",
    provider_model_id="claude-test-1",
    base_url="http://h:9000",
    chat_path="/custom/messages?beta=true",
    api_format="anthropic",
    api_key_env="WIRE_KEY",
    extra_headers={"anthropic-version": "2024-01-01"},
)
BODY = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


def test_wire_for_picks_the_protocol():
    assert isinstance(wire_for(CHAT), ChatWire) and isinstance(wire_for(MESSAGES), MessagesWire)


def test_urls_and_paths():
    assert wire_for(CHAT).url(CHAT) == "http://h:8000/v1/chat/completions"
    assert wire_for(CHAT).path(CHAT) == "/v1/chat/completions"
    assert wire_for(MESSAGES).url(MESSAGES) == "http://h:9000/custom/messages?beta=true"
    assert wire_for(MESSAGES).path(MESSAGES) == "/custom/messages?beta=true"
    assert url_path("http://h") == "/"


def test_request_bodies_rewrite_the_model():
    assert wire_for(CHAT).request_body(BODY, CHAT) == {**BODY, "model": "gpt-4o"}
    out = wire_for(MESSAGES).request_body(BODY, MESSAGES)
    assert out["model"] == "claude-test-1" and out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
    with pytest.raises(MessagesTranslationError) as info:
        wire_for(MESSAGES).request_body({**BODY, "n": 2}, MESSAGES)
    assert info.value.status == 400 and info.value.body()["error"]["code"] == UNSUPPORTED_CODE


def test_request_headers_credentials_then_extra_headers(monkeypatch):
    monkeypatch.setenv("WIRE_KEY", "k1")
    assert wire_for(MESSAGES).request_headers(MESSAGES) == {
        "anthropic-version": "2024-01-01",
        "x-api-key": "k1",
    }
    keyed = CHAT.model_copy(update={"api_key_env": "WIRE_KEY"})
    assert wire_for(keyed).request_headers(keyed) == {"Authorization": "Bearer k1", "X-Team": "a"}


def test_chat_answers_pass_through():
    assert wire_for(CHAT).answer(200, b"anything", CHAT) == (200, b"anything")
    assert wire_for(CHAT).answer(500, b"<html>", CHAT) == (500, b"<html>")


def test_messages_answers_become_chat():
    wire = wire_for(MESSAGES)
    status, content = wire.answer(200, json.dumps(MESSAGE).encode(), MESSAGES)
    chat = json.loads(content)
    assert status == 200 and chat["object"] == "chat.completion" and chat["model"] == "claude"
    assert chat["choices"][0]["message"]["content"] == "hello" and chat["usage"]["total_tokens"] == 4
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    status, content = wire.answer(429, json.dumps(error).encode(), MESSAGES)
    assert status == 429
    assert json.loads(content) == {
        "error": {"message": "slow down", "type": "rate_limit_error", "code": None}
    }


def test_messages_answers_that_are_not_json():
    wire = wire_for(MESSAGES)
    assert wire.answer(502, b"<html>bad gateway</html>", MESSAGES) == (502, b"<html>bad gateway</html>")
    status, content = wire.answer(200, b"not json", MESSAGES)
    assert status == 502 and json.loads(content)["error"]["type"] == "upstream_error"
    status, content = wire.answer(200, json.dumps({**MESSAGE, "content": "x"}).encode(), MESSAGES)
    assert status == 502 and "malformed messages answer" in json.loads(content)["error"]["message"]


def events(raw: bytes) -> list:
    parser = SSEParser()
    return [e.data if e.data == "[DONE]" else e.json() for e in parser.feed(raw) + parser.close()]


def test_chat_stream_passes_through_and_fails_with_an_error_chunk():
    translator = wire_for(CHAT).stream_translator(CHAT, include_usage=False)
    assert isinstance(translator, ChatPassthrough) and translator.completed
    assert translator.feed(b"data: {}\n\n") == b"data: {}\n\n" and translator.finish() == b""
    assert events(translator.fail("gone")) == [
        {"error": {"message": "gone", "type": "upstream_error", "code": None}},
        "[DONE]",
    ]


def test_messages_stream_translator_honours_include_usage():
    def frame(kind: str, data: dict) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    raw = (
        frame("message_start", {"message": {"id": "m1", "usage": {"input_tokens": 2}}})
        + frame("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hi"}})
        + frame("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
        + frame("message_stop", {})
    )
    for include_usage in (True, False):
        translator = wire_for(MESSAGES).stream_translator(MESSAGES, include_usage)
        out = events(translator.feed(raw) + translator.finish())
        assert translator.completed and out[-1] == "[DONE]"
        assert any("usage" in e for e in out[:-1]) is include_usage
        assert all(e["model"] == "claude" for e in out[:-1])
