"""The one translation between chat completions and each upstream protocol.

The router speaks OpenAI chat everywhere (clients, cache, accounting); a target's
`api_format` picks the protocol spoken to its backend (`wire_for(target)`):

- `ChatWire` ("openai"): bodies pass through; only the model name is rewritten.
- `MessagesWire` ("anthropic"/"messages"): chat requests become `POST .../messages`
  requests, answers (whole bodies, error bodies, event streams) become chat again.

Both front doors use it the same way: the upstream client encodes each attempt's request
(`request_body`, `request_headers`, `url`), the exchange translates what comes back
(`answer`, `stream_translator`); Envoy's bridge uses `path` for its `:path` rewrite.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import urlsplit

from app.common.errors import error_body
from app.upstream.messages_api import MessagesTranslationError, messages_to_chat
from app.upstream.messages_request import chat_to_messages
from app.upstream.messages_stream import MessagesStreamTranslator
from app.upstream.sse import encode_done, encode_sse
from app.upstream.targets import UpstreamTarget


class StreamTranslator(Protocol):
    """Upstream SSE bytes in, `chat.completion.chunk` SSE bytes out."""

    @property
    def completed(self) -> bool:
        """The answer's end was seen (a chat passthrough always says so: the exchange's SSE
        accumulator judges a chat stream)."""
        ...

    def feed(self, raw: bytes) -> bytes: ...

    def finish(self) -> bytes:
        """Flush at the upstream body's end."""
        ...

    def fail(self, message: str) -> bytes:
        """End the client's stream now: an error chunk and [DONE]."""
        ...


class UpstreamWire(Protocol):
    """How chat requests and answers cross to one upstream protocol."""

    def url(self, target: UpstreamTarget) -> str: ...

    def path(self, target: UpstreamTarget) -> str:
        """Path and query of `url()` (Envoy's :path)."""
        ...

    def request_body(self, chat_body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        """The body to send, model rewritten; raises MessagesTranslationError (status 400)."""
        ...

    def request_headers(self, target: UpstreamTarget) -> dict[str, str]:
        """Protocol credentials, then the target's extra headers (which may override them)."""
        ...

    def answer(self, status: int, content: bytes, target: UpstreamTarget) -> tuple[int, bytes]:
        """A whole (non-stream) upstream body -> (status, chat JSON bytes)."""
        ...

    def stream_translator(self, target: UpstreamTarget, include_usage: bool) -> StreamTranslator:
        """A translator for a 2xx event-stream body."""
        ...


def json_object(content: bytes) -> dict[str, Any] | None:
    """`content` parsed, when it is a JSON object."""
    try:
        parsed = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def url_path(url: str) -> str:
    """Path and query string of an absolute URL."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def stream_error_end(message: str) -> bytes:
    """An `upstream_error` chunk and [DONE]: how a chat stream is cut short."""
    return encode_sse(error_body(message, "upstream_error")) + encode_done()


def _protocol_headers(target: UpstreamTarget) -> dict[str, str]:
    return {**target.auth_headers(), **target.extra_headers}


class ChatPassthrough:
    """A chat stream needs no translation; only `fail()` has something to add."""

    completed = True  # the exchange's SSE accumulator judges whether a chat stream ended

    def feed(self, raw: bytes) -> bytes:
        return raw

    def finish(self) -> bytes:
        return b""

    def fail(self, message: str) -> bytes:
        return stream_error_end(message)


class ChatWire:
    """OpenAI chat completions: bodies pass through, the model name rewritten."""

    def url(self, target: UpstreamTarget) -> str:
        return target.chat_url

    def path(self, target: UpstreamTarget) -> str:
        return url_path(self.url(target))

    def request_body(self, chat_body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return {**chat_body, "model": target.upstream_model}

    def request_headers(self, target: UpstreamTarget) -> dict[str, str]:
        return _protocol_headers(target)

    def answer(self, status: int, content: bytes, target: UpstreamTarget) -> tuple[int, bytes]:
        return status, content

    def stream_translator(self, target: UpstreamTarget, include_usage: bool) -> StreamTranslator:
        return ChatPassthrough()


class MessagesWire:
    """A messages-style backend: chat requests translated to it, its answers back to chat."""

    def url(self, target: UpstreamTarget) -> str:
        return target.messages_url

    def path(self, target: UpstreamTarget) -> str:
        return url_path(self.url(target))

    def request_body(self, chat_body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return chat_to_messages(chat_body, target.upstream_model)

    def request_headers(self, target: UpstreamTarget) -> dict[str, str]:
        return _protocol_headers(target)  # x-api-key + anthropic-version

    def answer(self, status: int, content: bytes, target: UpstreamTarget) -> tuple[int, bytes]:
        parsed = json_object(content)
        try:
            if parsed is None:
                if 200 <= status < 300:  # a success that is no message cannot become a chat answer
                    raise MessagesTranslationError(
                        "the messages upstream answered a body that is not JSON", 502
                    )
                return status, content  # an error page (a proxy's HTML...): relayed as it is
            chat = messages_to_chat(parsed, target.model)
        except MessagesTranslationError as exc:
            status, chat = exc.status, exc.body()
        return status, json.dumps(chat, ensure_ascii=False).encode("utf-8")

    def stream_translator(self, target: UpstreamTarget, include_usage: bool) -> StreamTranslator:
        return MessagesStreamTranslator(target.model, include_usage=include_usage)


_CHAT_WIRE = ChatWire()
_MESSAGES_WIRE = MessagesWire()


def wire_for(target: UpstreamTarget) -> UpstreamWire:
    """The protocol `target` speaks (wires hold no state: one shared instance each)."""
    return _MESSAGES_WIRE if target.wire_format == "messages" else _CHAT_WIRE


__all__ = [
    "ChatPassthrough",
    "ChatWire",
    "MessagesWire",
    "StreamTranslator",
    "UpstreamWire",
    "json_object",
    "stream_error_end",
    "url_path",
    "wire_for",
]
