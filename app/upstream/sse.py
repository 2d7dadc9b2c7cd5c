"""Server-sent events: incremental parsing, chat-stream accumulation, encoding, replay.

- `SSEParser` turns network chunks into events; a frame may be split anywhere
  (even inside a UTF-8 character or between "\\r" and "\\n").
- `StreamAccumulator` rebuilds the final assistant message from
  `chat.completion.chunk` events, so a streamed answer can be accounted for (usage,
  TTFT) and cached as a plain `chat.completion`.
- `replay_as_sse` serves a cached `chat.completion` to a streaming client.
"""

from __future__ import annotations

import codecs
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.upstream.json_fields import int_field, object_field

DONE_DATA = "[DONE]"
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
DEFAULT_REPLAY_CHUNK_CHARS = 24
_LINE_BREAK = re.compile(r"[\r\n]")


class SSEError(ValueError):
    """The event stream is malformed beyond recovery (e.g. an event over the size limit)."""


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    @property
    def is_done(self) -> bool:
        return self.data.strip() == DONE_DATA

    def json(self) -> Any:
        """The data parsed as JSON; raises ValueError when it is not JSON."""
        return json.loads(self.data)


class SSEParser:
    """Incremental WHATWG-style event-stream parser.

    `feed()` returns the events completed by this chunk; `close()` returns a final
    event that was not followed by a blank line (lenient: some servers omit it).
    """

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max = max_event_bytes
        self._pending = ""  # text after the last line break seen
        self._started = False
        self._data: list[str] = []
        self._data_size = 0
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self.comments = 0

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        text = chunk if isinstance(chunk, str) else self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        return self._consume(text, final=False)

    def close(self) -> list[SSEEvent]:
        tail = self._decoder.decode(b"", final=True)
        events = self._consume(tail, final=True)
        if self._pending:
            self._line(self._pending, events)
            self._pending = ""
        self._dispatch(events)
        return events

    def _consume(self, text: str, final: bool) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._pending + text
        pos = 0
        # _pending holds no line break except maybe a trailing "\r": skip rescanning it.
        scan = max(0, len(self._pending) - 1)
        while True:
            match = _LINE_BREAK.search(buf, scan)
            if match is None:
                break
            idx = match.start()
            if buf[idx] == "\r":
                if idx + 1 == len(buf) and not final:
                    break  # "\r" may be the first half of "\r\n": wait for the next chunk
                end = idx + 2 if idx + 1 < len(buf) and buf[idx + 1] == "\n" else idx + 1
            else:
                end = idx + 1
            self._line(buf[pos:idx], events)
            pos = scan = end
        self._pending = buf[pos:]
        if len(self._pending) + self._data_size > self._max:
            raise SSEError(f"server-sent event exceeds {self._max} bytes")
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_size += len(value) + 1
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event, self._id, self._retry))
        self._data, self._data_size, self._event, self._retry = [], 0, None, None


def encode_sse(obj: Any, event: str | None = None) -> bytes:
    """One event frame; dicts/lists are written as compact JSON, strings as they are."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    body = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (head + body + "\n").encode("utf-8")


def encode_done() -> bytes:
    return b"data: [DONE]\n\n"


@dataclass
class _ChoiceState:
    role: str | None = None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None


class StreamAccumulator:
    """Consumes `chat.completion.chunk` events and rebuilds the final answer."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._parser = SSEParser()
        self._choices: dict[int, _ChoiceState] = {}
        self.started_at: float = clock()
        self.first_token_at: float | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: Any = None
        self.chunk_count = 0
        self.done = False  # saw data: [DONE]
        self.invalid_events = 0

    # -- input ---------------------------------------------------------------
    def feed_bytes(self, chunk: bytes) -> list[SSEEvent]:
        """Parse raw upstream bytes and consume every completed event."""
        events = self._parser.feed(chunk)
        for event in events:
            self.add_event(event)
        return events

    def close(self) -> list[SSEEvent]:
        events = self._parser.close()
        for event in events:
            self.add_event(event)
        return events

    def add_event(self, event: SSEEvent) -> dict[str, Any] | None:
        """Consume one event; returns the parsed chunk (None for [DONE] or non-JSON)."""
        if event.is_done:
            self.done = True
            return None
        try:
            chunk = event.json()
        except ValueError:
            self.invalid_events += 1
            return None
        if not isinstance(chunk, dict):
            self.invalid_events += 1
            return None
        self.add_chunk(chunk)
        return chunk

    add = add_event  # short alias

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk and not chunk.get("choices"):
            self.error = chunk["error"]
            return
        self.chunk_count += 1
        self.id = self.id or _str_or_none(chunk.get("id"))
        self.model = self.model or _str_or_none(chunk.get("model"))
        if self.created is None and isinstance(chunk.get("created"), int):
            self.created = chunk["created"]
        self.system_fingerprint = self.system_fingerprint or _str_or_none(chunk.get("system_fingerprint"))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        for position, choice in enumerate(choices if isinstance(choices, list) else []):
            if isinstance(choice, dict):
                self._add_choice(position, choice)

    def _add_choice(self, position: int, choice: dict[str, Any]) -> None:
        index = int_field(choice, "index", position)
        state = self._choices.setdefault(index, _ChoiceState())
        delta = object_field(choice, "delta")
        produced = False
        if isinstance(delta.get("role"), str):
            state.role = delta["role"]
        for key, target in (("content", state.content), ("refusal", state.refusal)):
            if isinstance(delta.get(key), str) and delta[key]:
                target.append(delta[key])
                produced = True
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            state.reasoning.append(reasoning)
            produced = True
        tool_calls = delta.get("tool_calls")
        for pos, call in enumerate(tool_calls if isinstance(tool_calls, list) else []):
            if isinstance(call, dict):
                _merge_tool_call(state, pos, call)
                produced = True
        if choice.get("finish_reason"):
            state.finish_reason = str(choice["finish_reason"])
        if produced and self.first_token_at is None:
            self.first_token_at = self._clock()

    # -- results -------------------------------------------------------------
    @property
    def content(self) -> str:
        state = self._choices.get(0)
        return "".join(state.content) if state else ""

    @property
    def reasoning_content(self) -> str:
        state = self._choices.get(0)
        return "".join(state.reasoning) if state else ""

    @property
    def finish_reason(self) -> str | None:
        state = self._choices.get(0)
        return state.finish_reason if state else None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        state = self._choices.get(0)
        return [state.tool_calls[i] for i in sorted(state.tool_calls)] if state else []

    @property
    def completed(self) -> bool:
        """True when the stream ended properly: [DONE] or a finish_reason, and no error."""
        if self.error is not None:
            return False
        return self.done or any(s.finish_reason for s in self._choices.values())

    @property
    def ttft_s(self) -> float | None:
        """Seconds from construction to the first content/tool token."""
        return None if self.first_token_at is None else self.first_token_at - self.started_at

    def to_chat_completion(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self._choices) or [0]:
            state = self._choices.get(index, _ChoiceState())
            message: dict[str, Any] = {"role": state.role or "assistant"}
            text = "".join(state.content)
            calls = [state.tool_calls[i] for i in sorted(state.tool_calls)]
            message["content"] = text if text or not calls else None
            if state.refusal:
                message["refusal"] = "".join(state.refusal)
            if state.reasoning:
                message["reasoning_content"] = "".join(state.reasoning)
            if calls:
                message["tool_calls"] = calls
            choices.append(
                {"index": index, "message": message, "finish_reason": state.finish_reason, "logprobs": None}
            )
        result: dict[str, Any] = {
            "id": self.id or f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": self.created if self.created is not None else int(time.time()),
            "model": self.model or "",
            "choices": choices,
        }
        if self.system_fingerprint:
            result["system_fingerprint"] = self.system_fingerprint
        if self.usage is not None:
            result["usage"] = self.usage
        return result


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _merge_tool_call(state: _ChoiceState, position: int, delta: dict[str, Any]) -> None:
    index = int_field(delta, "index", position)
    call = state.tool_calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if isinstance(delta.get("id"), str) and delta["id"]:
        call["id"] = delta["id"]
    if isinstance(delta.get("type"), str) and delta["type"]:
        call["type"] = delta["type"]
    function = object_field(delta, "function")
    name = function.get("name")
    # Most servers send the name once; some repeat it in every delta; none split it.
    if isinstance(name, str) and name and name != call["function"]["name"]:
        call["function"]["name"] += name
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        call["function"]["arguments"] += arguments


def _split(text: str, size: int) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text), size))


def replay_as_sse(
    chat_completion: dict[str, Any],
    chunk_chars: int = DEFAULT_REPLAY_CHUNK_CHARS,
    include_usage: bool = True,
) -> list[bytes]:
    """Frames that stream a stored `chat.completion` as `chat.completion.chunk` events.

    Per choice: a role chunk, reasoning then content pieces of `chunk_chars`
    characters, one chunk per tool call, a finish chunk; then a usage chunk (when the
    answer has usage and `include_usage`), then `data: [DONE]`.
    """
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be >= 1")
    base = {
        "id": chat_completion.get("id") or f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": chat_completion.get("created") or int(time.time()),
        "model": chat_completion.get("model") or "",
    }
    if chat_completion.get("system_fingerprint"):
        base["system_fingerprint"] = chat_completion["system_fingerprint"]

    def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return encode_sse({**base, "choices": [choice]})

    frames: list[bytes] = []
    choices = chat_completion.get("choices") or []
    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        message = choice.get("message") or {}
        frames.append(chunk(index, {"role": message.get("role") or "assistant", "content": ""}))
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str):
            frames.extend(
                chunk(index, {"reasoning_content": piece}) for piece in _split(reasoning, chunk_chars)
            )
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep their text
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str):
            frames.extend(chunk(index, {"content": piece}) for piece in _split(content, chunk_chars))
        if isinstance(message.get("refusal"), str) and message["refusal"]:
            frames.append(chunk(index, {"refusal": message["refusal"]}))
        for n, call in enumerate(message.get("tool_calls") or []):
            frames.append(chunk(index, {"tool_calls": [{"index": n, **call}]}))
        frames.append(chunk(index, {}, choice.get("finish_reason") or "stop"))
    if include_usage and isinstance(chat_completion.get("usage"), dict):
        frames.append(encode_sse({**base, "choices": [], "usage": chat_completion["usage"]}))
    frames.append(encode_done())
    return frames
