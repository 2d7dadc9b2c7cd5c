"""A messages-style event stream -> `chat.completion.chunk` SSE, incrementally.

Pure bytes in, bytes out (frames may be split anywhere), so either front door can feed
it whatever chunks its transport delivers.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import ValidationError

from app.common.errors import error_body
from app.upstream.json_fields import object_field
from app.upstream.messages_api import (
    MessagesErrorDetail,
    MessagesUsage,
    chat_id,
    chat_usage,
    error_to_chat,
    finish_reason,
)
from app.upstream.sse import SSEEvent, SSEParser, encode_done, encode_sse


class MessagesStreamTranslator:
    """Messages event-stream bytes in, `chat.completion.chunk` SSE bytes out.

    message_start -> role chunk; text_delta -> content; thinking_delta ->
    reasoning_content; tool_use start -> tool_calls[{index, id, type, function.name}];
    input_json_delta -> tool_calls[].function.arguments; message_delta.stop_reason ->
    finish_reason chunk; message_stop -> usage chunk (when `include_usage`) and
    `data: [DONE]`; `event: error` -> an OpenAI error chunk and [DONE]; ping and
    unknown events are ignored. `finish()` flushes a stream that ended without
    message_stop: usage and [DONE] when its stop_reason was seen, otherwise an error
    chunk (the answer is truncated) and [DONE].

    It never raises: input it cannot translate (an event that breaks the parser or
    the translation) ends the chat stream cleanly with an `upstream_error` chunk and
    [DONE]; `fail()` does the same for a caller that has to cut the stream short.
    `done`: nothing more will be emitted. `completed`: the answer ended properly
    (message_stop, or its stop_reason before the body ended) and no error was seen;
    only a completed stream is a whole answer (cacheable).
    """

    def __init__(self, model: str, request_id: str = "", *, include_usage: bool = True) -> None:
        self.model = model
        self.include_usage = include_usage
        self._parser = SSEParser()
        self._id = request_id or ""
        self._created = int(time.time())
        self._started = False
        self._tool_index: dict[int, int] = {}  # content block index -> tool_calls index
        self._usage = MessagesUsage()
        self.finish_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self._stopped = False  # message_stop seen

    @property
    def completed(self) -> bool:
        if self.error is not None or not self.done:
            return False
        return self._stopped or self.finish_reason is not None

    def feed(self, raw: bytes) -> bytes:
        if self.done:
            return b""
        try:
            events = self._parser.feed(raw)
        except Exception as exc:  # e.g. an event over the parser's size limit
            return self.fail(f"cannot read the messages stream: {exc}")
        return self._events(events)

    def fail(self, message: str) -> bytes:
        """End the chat stream now: an `upstream_error` chunk and [DONE] (b"" when already done)."""
        if self.done:
            return b""
        self.done = True
        return self._error_frame("upstream_error", message) + encode_done()

    def finish(self) -> bytes:
        if self.done:
            return b""
        try:
            events = self._parser.close()
        except Exception as exc:
            return self.fail(f"cannot read the messages stream: {exc}")
        out = self._events(events)
        if self.done:
            return out
        frames = [out]
        if self.finish_reason is None:
            frames.append(
                self._error_frame("upstream_error", "the messages stream ended before its stop_reason")
            )
        elif self.include_usage:
            frames.append(self._usage_frame())
        frames.append(encode_done())
        self.done = True
        return b"".join(frames)

    # -- events ------------------------------------------------------------------------
    def _events(self, events: list[SSEEvent]) -> bytes:
        frames: list[bytes] = []
        for event in events:
            if self.done:
                break
            try:
                data = event.json()
            except ValueError:
                continue  # a non-JSON frame carries nothing we can relay
            if not isinstance(data, dict):
                continue
            try:
                self._on_event(str(data.get("type") or event.event or ""), data, frames)
            except Exception as exc:  # a malformed event: end the stream cleanly, never hang
                frames.append(self.fail(f"cannot translate a messages stream event ({type(exc).__name__})"))
        return b"".join(frames)

    def _on_event(self, kind: str, data: dict[str, Any], frames: list[bytes]) -> None:
        if kind == "message_start":
            message = object_field(data, "message")
            if not self._id and isinstance(message.get("id"), str):
                self._id = chat_id(message["id"])
            self._add_usage(message.get("usage"))
            self._start(frames)
        elif kind == "content_block_start":
            self._block_start(data, frames)
        elif kind == "content_block_delta":
            self._block_delta(data, frames)
        elif kind == "message_delta":
            delta = object_field(data, "delta")
            self._add_usage(data.get("usage"))
            reason = finish_reason(delta.get("stop_reason"))
            if reason is not None:
                self._start(frames)
                self.finish_reason = reason
                frames.append(self._chunk({}, reason))
        elif kind == "message_stop":
            self._stopped = True
            if self.include_usage:
                frames.append(self._usage_frame())
            frames.append(encode_done())
            self.done = True
        elif kind == "error":
            detail = object_field(data, "error")
            self.error = error_to_chat(MessagesErrorDetail.model_validate(detail))["error"]
            frames.append(encode_sse({"error": self.error}))
            frames.append(encode_done())
            self.done = True
        # ping, content_block_stop and future event types carry nothing for chat

    def _block_start(self, data: dict[str, Any], frames: list[bytes]) -> None:
        block = object_field(data, "content_block")
        index = data.get("index")
        if block.get("type") == "tool_use" and isinstance(index, int):
            position = self._tool_index.setdefault(index, len(self._tool_index))
            self._start(frames)
            call = {
                "index": position,
                "id": block.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": block.get("name") or "", "arguments": ""},
            }
            frames.append(self._chunk({"tool_calls": [call]}))
        elif block.get("type") == "text" and block.get("text"):
            self._start(frames)
            frames.append(self._chunk({"content": block["text"]}))

    def _block_delta(self, data: dict[str, Any], frames: list[bytes]) -> None:
        delta = object_field(data, "delta")
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            self._start(frames)
            frames.append(self._chunk({"content": delta["text"]}))
        elif kind == "thinking_delta" and delta.get("thinking"):
            self._start(frames)
            frames.append(self._chunk({"reasoning_content": delta["thinking"]}))
        elif kind == "input_json_delta" and delta.get("partial_json"):
            index = data.get("index")
            position = self._tool_index.get(index) if isinstance(index, int) else None
            if position is not None:
                call = {"index": position, "function": {"arguments": delta["partial_json"]}}
                frames.append(self._chunk({"tool_calls": [call]}))

    # -- frames --------------------------------------------------------------------------
    def _start(self, frames: list[bytes]) -> None:
        if not self._started:
            self._started = True
            frames.append(self._chunk({"role": "assistant", "content": ""}))

    def _add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        try:
            update = MessagesUsage.model_validate(usage)
        except ValidationError:
            return
        # message_delta usage is cumulative: later values replace earlier ones.
        for name, value in update:
            if value is not None:
                setattr(self._usage, name, value)

    def _base(self) -> dict[str, Any]:
        if not self._id:
            self._id = chat_id(None)
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self.model,
        }

    def _chunk(self, delta: dict[str, Any], reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return encode_sse({**self._base(), "choices": [choice]})

    def _usage_frame(self) -> bytes:
        return encode_sse({**self._base(), "choices": [], "usage": chat_usage(self._usage)})

    def _error_frame(self, kind: str, message: str) -> bytes:
        self.error = error_body(message, kind)["error"]
        return encode_sse({"error": self.error})


__all__ = ["MessagesStreamTranslator"]
