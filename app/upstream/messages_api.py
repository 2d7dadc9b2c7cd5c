"""Chat completions <-> a messages-style upstream (`POST /v1/messages`, Anthropic's wire shape).

Clients always speak OpenAI chat; a model whose `api_format` is "anthropic" or
"messages" is served by translating each way, in three modules:

- `messages_request.chat_to_messages(chat_body, upstream_model)`: the request (see there).
  Input that cannot be expressed raises `MessagesTranslationError` (status 400).
- here, `messages_to_chat(resp, model)`: a message -> `chat.completion`; an error body
  -> an OpenAI error body. Usage follows the OpenAI convention that cached tokens
  are part of prompt_tokens: prompt_tokens = input + cache_read + cache_creation,
  with prompt_tokens_details.cached_tokens / cache_write_tokens.
- `messages_stream.MessagesStreamTranslator`: upstream event-stream bytes ->
  `chat.completion.chunk` SSE bytes, incrementally (frames may be split anywhere).

`app.upstream.wire.MessagesWire` puts them together for the exchange (both front doors).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.common.errors import error_body

UNSUPPORTED_CODE = "unsupported_for_upstream_format"  # error.code of a request refused with 400
# stop_reason -> finish_reason
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class MessagesTranslationError(ValueError):
    """A body cannot be translated; `status`: 400 for a request, 502 for an upstream answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body both front doors answer with (same status as `status`)."""
        if self.status < 500:
            return error_body(str(self), "invalid_request_error", UNSUPPORTED_CODE)
        return error_body(str(self), "upstream_error")


# -- wire shapes: response -------------------------------------------------------------
class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MessagesUsage(_Lenient):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class ResponseBlock(_Lenient):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    thinking: str | None = None


class MessagesResponse(_Lenient):
    id: str = ""
    type: Literal["message"] = "message"
    role: str = "assistant"
    model: str | None = None
    content: list[ResponseBlock] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: MessagesUsage = Field(default_factory=MessagesUsage)


class MessagesErrorDetail(_Lenient):
    type: str = "api_error"
    message: str = ""


class MessagesErrorBody(_Lenient):
    type: Literal["error"] = "error"
    error: MessagesErrorDetail = Field(default_factory=MessagesErrorDetail)


# -- response: messages -> chat ------------------------------------------------------------
def chat_usage(usage: MessagesUsage) -> dict[str, Any]:
    """OpenAI usage; cached and cache-write tokens are counted inside prompt_tokens."""
    cached = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    prompt = (usage.input_tokens or 0) + cached + written
    completion = usage.output_tokens or 0
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if usage.cache_read_input_tokens is not None or usage.cache_creation_input_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached, "cache_write_tokens": written}
    return out


def error_to_chat(error: MessagesErrorDetail) -> dict[str, Any]:
    return error_body(error.message or error.type, error.type)


def messages_to_chat(resp: dict[str, Any], model: str) -> dict[str, Any]:
    """A `chat.completion` for a message, an OpenAI error body for an error body.

    A body that is neither (e.g. a proxy's own JSON) is returned unchanged; a
    malformed message raises MessagesTranslationError(status=502).
    """
    if resp.get("type") == "error" and isinstance(resp.get("error"), dict):
        try:
            return error_to_chat(MessagesErrorBody.model_validate(resp).error)
        except ValidationError as exc:
            raise MessagesTranslationError(
                f"malformed messages error: {exc.errors()[0]['msg']}", 502
            ) from exc
    if resp.get("type") != "message":
        return resp
    try:
        message = MessagesResponse.model_validate(resp)
    except ValidationError as exc:
        raise MessagesTranslationError(f"malformed messages answer: {exc.errors()[0]['msg']}", 502) from exc
    texts, reasoning, calls = [], [], []
    for block in message.content:
        if block.type == "text" and block.text:
            texts.append(block.text)
        elif block.type == "thinking" and block.thinking:
            reasoning.append(block.thinking)
        elif block.type == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else {}
            calls.append(
                {
                    "id": block.id or f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {
                        "name": block.name or "",
                        "arguments": json.dumps(arguments, ensure_ascii=False),
                    },
                }
            )
    chat_message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
    }
    if reasoning:
        chat_message["reasoning_content"] = "".join(reasoning)
    if calls:
        chat_message["tool_calls"] = calls
    return {
        "id": chat_id(message.id),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": chat_message,
                "finish_reason": finish_reason(message.stop_reason),
                "logprobs": None,
            }
        ],
        "usage": chat_usage(message.usage),
    }


def finish_reason(stop_reason: str | None) -> str | None:
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")


def chat_id(message_id: str | None) -> str:
    return f"chatcmpl-{message_id}" if message_id else f"chatcmpl-{uuid.uuid4().hex}"


__all__ = [
    "FINISH_REASONS",
    "MessagesErrorDetail",
    "MessagesResponse",
    "MessagesTranslationError",
    "MessagesUsage",
    "UNSUPPORTED_CODE",
    "chat_id",
    "chat_usage",
    "error_to_chat",
    "finish_reason",
    "messages_to_chat",
]
