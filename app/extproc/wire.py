"""How the bridge speaks to one kind of upstream once Envoy forwards the request.

Behind Envoy the bridge cannot call the backend itself; it rewrites what Envoy sends
(path, body, auth headers) and what comes back (buffered JSON, or SSE chunk by chunk).
`ChatWire` is the OpenAI chat protocol (nothing to translate); `MessagesWire` is a
messages-style backend (`api_format: anthropic` or `messages`), translated both ways.

Translation failures: `request_body` and `response_body` raise MessagesTranslationError
(`.status` 400 for a request the backend cannot express, 502 for an answer that is no
message); a stream never raises, it ends with an error chunk and [DONE]
(`stream_fail`). `stream_completed` says whether a stream carried a whole answer.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import urlsplit

from app.upstream.sse import StreamAccumulator, encode_done, encode_sse
from app.upstream.targets import UpstreamTarget


def upstream_path(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


class UpstreamWire(Protocol):
    translates_responses: bool

    def path(self, target: UpstreamTarget) -> str: ...

    def request_body(self, body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]: ...

    def auth_headers(self, target: UpstreamTarget) -> dict[str, str]: ...

    def response_body(self, raw: bytes, status: int, model: str) -> dict[str, Any] | None:
        """The answer as a chat.completion (or error body); None when it is not JSON."""
        ...

    def stream_chunk(self, raw: bytes) -> bytes:
        """Upstream SSE bytes in, chat.completion.chunk SSE bytes out."""
        ...

    def stream_end(self) -> bytes: ...

    def stream_fail(self, message: str) -> bytes:
        """End the client's stream now: an error chunk and [DONE]."""
        ...

    def stream_completed(self, accumulator: StreamAccumulator) -> bool:
        """The stream carried a whole answer (`accumulator` holds the chat chunks sent)."""
        ...


def _error_end(message: str) -> bytes:
    return encode_sse({"error": {"message": message, "type": "upstream_error", "code": None}}) + encode_done()


class ChatWire:
    translates_responses = False

    def path(self, target: UpstreamTarget) -> str:
        return upstream_path(target.chat_url)

    def request_body(self, body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return body

    def auth_headers(self, target: UpstreamTarget) -> dict[str, str]:
        return target.auth_headers()

    def response_body(self, raw: bytes, status: int, model: str) -> dict[str, Any] | None:
        return _json_object(raw)

    def stream_chunk(self, raw: bytes) -> bytes:
        return raw

    def stream_end(self) -> bytes:
        return b""

    def stream_fail(self, message: str) -> bytes:
        return _error_end(message)

    def stream_completed(self, accumulator: StreamAccumulator) -> bool:
        return accumulator.completed  # a finish_reason or [DONE], and no error chunk


class MessagesWire:
    """A messages-style backend (`POST /v1/messages`)."""

    translates_responses = True

    def __init__(self, target: UpstreamTarget) -> None:
        from app.upstream import messages_api

        self._api = messages_api
        self._stream = messages_api.MessagesStreamTranslator(target.model, "")

    def path(self, target: UpstreamTarget) -> str:
        return upstream_path(self._api.messages_url(target))

    def request_body(self, body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return self._api.chat_to_messages(body, target.upstream_model)

    def auth_headers(self, target: UpstreamTarget) -> dict[str, str]:
        return self._api.messages_headers(target)

    def response_body(self, raw: bytes, status: int, model: str) -> dict[str, Any] | None:
        body = _json_object(raw)
        if body is None:
            if 200 <= status < 300:  # a success that is no message cannot become a chat answer
                raise self._api.MessagesTranslationError("the messages upstream answered a body that is not JSON",
                                                         502)
            return None  # an error page: relayed as it is
        return self._api.messages_to_chat(body, model)

    def stream_chunk(self, raw: bytes) -> bytes:
        return self._stream.feed(raw)

    def stream_end(self) -> bytes:
        return self._stream.finish()

    def stream_fail(self, message: str) -> bytes:
        return self._stream.fail(message)

    def stream_completed(self, accumulator: StreamAccumulator) -> bool:
        return self._stream.completed  # stop_reason/message_stop seen, no error event


def wire_for(target: UpstreamTarget) -> UpstreamWire:
    if target.wire_format == "messages":
        return MessagesWire(target)
    return ChatWire()
