"""Chat completions <-> a messages-style upstream (`POST /v1/messages`, Anthropic's wire shape).

Clients always speak OpenAI chat; a model whose `api_format` is "anthropic" or
"messages" is served by translating each way:

- `chat_to_messages(chat_body, upstream_model)`: the request. system/developer
  messages -> `system`; tool calls -> `tool_use` blocks; `role: tool` messages ->
  `tool_result` blocks in a user turn; consecutive same-role turns are merged (the
  messages API wants user/assistant alternation); tools, tool_choice, max_tokens
  (required upstream: DEFAULT_MAX_TOKENS when the chat request has none), stop,
  temperature (clamped to the messages range 0..1), top_p, top_k, stream, user.
  Parameters with no messages counterpart that do not change the answer's meaning
  (penalties, seed, logit_bias, logprobs, stream_options, reasoning_effort,
  chat_template_kwargs, ...) are dropped; input that cannot be expressed (n > 1,
  response_format json, audio, legacy functions, bad tool arguments) raises
  `MessagesTranslationError` (status 400).
- `messages_to_chat(resp, model)`: a message -> `chat.completion`; an error body
  -> an OpenAI error body. Usage follows the OpenAI convention that cached tokens
  are part of prompt_tokens: prompt_tokens = input + cache_read + cache_creation,
  with prompt_tokens_details.cached_tokens / cache_write_tokens.
- `MessagesStreamTranslator`: upstream event-stream bytes -> `chat.completion.chunk`
  SSE bytes, incrementally (frames may be split anywhere). Pure bytes in/bytes out,
  so the standalone client and the Envoy ext_proc bridge (STREAMED body chunks)
  share it.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.upstream.sse import SSEEvent, SSEParser, encode_done, encode_sse
from app.upstream.targets import UpstreamTarget

DEFAULT_MAX_TOKENS = 4096
UNSUPPORTED_CODE = "unsupported_for_upstream_format"  # error.code of a request refused with 400
MAX_TEMPERATURE = 1.0  # the messages API refuses more; OpenAI allows up to 2

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
_DATA_URL = re.compile(
    r"^data:(?P<media>[\w.+-]+/[\w.+-]+)(?P<params>(?:;[^,;]*)*?);base64,(?P<data>.*)$", re.S
)


class MessagesTranslationError(ValueError):
    """A body cannot be translated; `status`: 400 for a request, 502 for an upstream answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body both front doors answer with (same status as `status`)."""
        if self.status < 500:
            error = {"message": str(self), "type": "invalid_request_error", "code": UNSUPPORTED_CODE}
        else:
            error = {"message": str(self), "type": "upstream_error", "code": None}
        return {"error": error}


# -- wire shapes: request ------------------------------------------------------------
class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Wire):
    type: Literal["text"] = "text"
    text: str


class ImageSource(_Wire):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ImageBlock(_Wire):
    type: Literal["image"] = "image"
    source: ImageSource


class DocumentSource(_Wire):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class DocumentBlock(_Wire):
    type: Literal["document"] = "document"
    source: DocumentSource


class ToolUseBlock(_Wire):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Wire):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | None = None


ContentBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]


class MessagesMessage(_Wire):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]


class MessagesTool(_Wire):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]


class MessagesToolChoice(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class MessagesMetadata(_Wire):
    user_id: str


class MessagesRequest(_Wire):
    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[MessagesMessage] = Field(min_length=1)
    system: str | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=MAX_TEMPERATURE)
    top_p: float | None = None
    top_k: int | None = None
    stream: bool | None = None
    metadata: MessagesMetadata | None = None
    tools: list[MessagesTool] | None = None
    tool_choice: MessagesToolChoice | None = None
    thinking: dict[str, Any] | None = None


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


# -- targets -------------------------------------------------------------------------
def messages_url(target: UpstreamTarget) -> str:
    return target.messages_url


def messages_headers(target: UpstreamTarget) -> dict[str, str]:
    """`x-api-key` + `anthropic-version` when the target names api_key_env, else none."""
    return target.auth_headers() if target.wire_format == "messages" else {}


# -- request: chat -> messages ---------------------------------------------------------
def chat_to_messages(
    chat_body: dict[str, Any], upstream_model: str, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """The messages request for a chat-completions body; raises MessagesTranslationError."""
    if not isinstance(chat_body, dict):
        raise MessagesTranslationError("the request body must be a JSON object")
    _refuse_unsupported(chat_body)
    system, turns = _conversation(chat_body.get("messages"))
    request: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": _max_tokens(chat_body, default_max_tokens),
        "messages": turns,
    }
    if system:
        request["system"] = system
    stops = _stop_sequences(chat_body.get("stop"))
    if stops:
        request["stop_sequences"] = stops
    temperature = _number(chat_body, "temperature")
    if temperature is not None:
        request["temperature"] = min(max(temperature, 0.0), MAX_TEMPERATURE)
    top_p = _number(chat_body, "top_p")
    if top_p is not None:
        request["top_p"] = top_p
    top_k = chat_body.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0:
        request["top_k"] = top_k
    if chat_body.get("stream"):
        request["stream"] = True
    user = chat_body.get("user") or chat_body.get("safety_identifier")
    if isinstance(user, str) and user:
        request["metadata"] = {"user_id": user}
    if isinstance(chat_body.get("thinking"), dict):  # explicit messages-style opt-in
        request["thinking"] = chat_body["thinking"]
    tools = chat_body.get("tools")
    if tools:
        request["tools"] = _tools(tools)
        choice = _tool_choice(chat_body.get("tool_choice"), chat_body.get("parallel_tool_calls"))
        if choice:
            request["tool_choice"] = choice
    try:
        return MessagesRequest.model_validate(request).model_dump(exclude_none=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise MessagesTranslationError(
            f"cannot build the messages request ({where}: {first['msg']})"
        ) from exc


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise MessagesTranslationError("n > 1 is not supported by messages-style models")
    if body.get("functions") or body.get("function_call"):
        raise MessagesTranslationError("legacy `functions`/`function_call` are not supported; use `tools`")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise MessagesTranslationError(
            f"response_format {fmt.get('type')!r} is not supported by messages-style models"
        )
    modalities = body.get("modalities")
    if body.get("audio") or (isinstance(modalities, list) and "audio" in modalities):
        raise MessagesTranslationError("audio output is not supported by messages-style models")


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MessagesTranslationError(f"{key} must be a positive integer")
        return value
    return default


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MessagesTranslationError(f"{key} must be a number")
    return float(value)


def _stop_sequences(stop: Any) -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise MessagesTranslationError("stop must be a string or an array of strings")
    return [s for s in items if s]


def _conversation(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """(system text, alternating user/assistant turns)."""
    if not isinstance(messages, list) or not messages:
        raise MessagesTranslationError("messages must be a non-empty array")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise MessagesTranslationError(f"{where} must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            text = _plain_text(message.get("content"), where)
            if text:
                system.append(text)
            continue
        if role == "user":
            blocks = _user_blocks(message.get("content"), where)
        elif role == "assistant":
            blocks = _assistant_blocks(message, where)
        elif role == "tool":
            blocks = [_tool_result(message, where)]
            role = "user"
        elif role == "function":
            raise MessagesTranslationError(f"{where}: legacy role 'function' is not supported; use tools")
        else:
            raise MessagesTranslationError(f"{where}.role {role!r} is not supported")
        if not blocks:
            continue  # e.g. an empty assistant turn: the messages API refuses empty text
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # tool results of parallel calls share one user turn
        else:
            turns.append({"role": role, "content": blocks})
    if not turns:
        raise MessagesTranslationError("messages must contain at least one user or assistant message")
    return "\n\n".join(system), turns


def _plain_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessagesTranslationError(f"{where}.content must be a string or an array of content parts")
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "refusal"):
            raise MessagesTranslationError(f"{where}.content[{i}]: only text parts are allowed here")
        texts.append(str(part.get("text") or part.get("refusal") or ""))
    return "\n".join(texts)


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise MessagesTranslationError(f"{where}.content must be a string or an array of content parts")
    blocks = [_part_block(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    return [b for b in blocks if b is not None]


def _part_block(part: Any, where: str) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        raise MessagesTranslationError(f"{where} must be an object")
    kind = part.get("type")
    if kind in ("text", "input_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise MessagesTranslationError(f"{where}.text must be a string")
        return {"type": "text", "text": text} if text else None
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str) or not url:
            raise MessagesTranslationError(f"{where}.image_url.url is required")
        return {"type": "image", "source": _source(url, where)}
    if kind == "file":
        file = part.get("file") if isinstance(part.get("file"), dict) else {}
        data = file.get("file_data")
        if not isinstance(data, str) or not data:
            raise MessagesTranslationError(f"{where}: only inline files (file.file_data) are supported")
        return {"type": "document", "source": _source(data, where)}
    raise MessagesTranslationError(f"{where}: content part type {kind!r} is not supported")


def _source(url: str, where: str) -> dict[str, Any]:
    match = _DATA_URL.match(url)
    if match:
        return {"type": "base64", "media_type": match["media"], "data": match["data"]}
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    raise MessagesTranslationError(f"{where}: expected an http(s) URL or a base64 data URL")


def _assistant_blocks(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = _plain_text(message.get("content"), where)
    if text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise MessagesTranslationError(f"{where}.tool_calls must be an array")
    for i, call in enumerate(calls):
        blocks.append(_tool_use(call, f"{where}.tool_calls[{i}]"))
    return blocks


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise MessagesTranslationError(f"{where} must be an object with a function")
    if call.get("type", "function") != "function":
        raise MessagesTranslationError(f"{where}: tool call type {call.get('type')!r} is not supported")
    function = call["function"]
    call_id, name = call.get("id"), function.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise MessagesTranslationError(f"{where} needs an id and a function name")
    raw = function.get("arguments")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        arguments: Any = {}
    elif isinstance(raw, dict):
        arguments = raw
    else:
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else None
        except ValueError as exc:
            raise MessagesTranslationError(f"{where}.function.arguments is not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise MessagesTranslationError(f"{where}.function.arguments must be a JSON object")
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _tool_result(message: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise MessagesTranslationError(f"{where}.tool_call_id is required")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    content = message.get("content")
    if isinstance(content, str):
        if content:
            block["content"] = content
    elif isinstance(content, list):
        parts = _user_blocks(content, where)
        if any(p["type"] not in ("text", "image") for p in parts):
            raise MessagesTranslationError(f"{where}: tool results may hold text and images only")
        if parts:
            block["content"] = parts
    elif content is not None:
        raise MessagesTranslationError(f"{where}.content must be a string or an array of content parts")
    return block


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise MessagesTranslationError("tools must be an array")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise MessagesTranslationError(f"{where}: only function tools are supported")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MessagesTranslationError(f"{where}.function.name is required")
        schema = function.get("parameters")
        if schema is None:
            schema = {"type": "object", "properties": {}}
        if not isinstance(schema, dict):
            raise MessagesTranslationError(f"{where}.function.parameters must be a JSON schema object")
        entry: dict[str, Any] = {"name": function["name"], "input_schema": schema}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        out.append(entry)
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None:
        out: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        out = {"type": "tool", "name": choice["function"]["name"]}
    else:
        raise MessagesTranslationError(f"tool_choice {choice!r} is not supported")
    if out is not None and parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


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
    return {"error": {"message": error.message or error.type, "type": error.type, "code": None}}


def messages_to_chat(resp: dict[str, Any], model: str) -> dict[str, Any]:
    """A `chat.completion` for a message, an OpenAI error body for an error body.

    A body that is neither (e.g. a proxy's own JSON) is returned unchanged; a
    malformed message raises MessagesTranslationError(status=502).
    """
    if resp.get("type") == "error" and isinstance(resp.get("error"), dict):
        try:
            return error_to_chat(MessagesErrorBody.model_validate(resp).error)
        except ValidationError as exc:
            raise MessagesTranslationError(f"malformed messages error: {exc.errors()[0]['msg']}", 502) from exc
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
        "id": _chat_id(message.id),
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


def _chat_id(message_id: str | None) -> str:
    return f"chatcmpl-{message_id}" if message_id else f"chatcmpl-{uuid.uuid4().hex}"


# -- streaming -------------------------------------------------------------------------
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
            message = data.get("message") if isinstance(data.get("message"), dict) else {}
            if not self._id and isinstance(message.get("id"), str):
                self._id = _chat_id(message["id"])
            self._add_usage(message.get("usage"))
            self._start(frames)
        elif kind == "content_block_start":
            self._block_start(data, frames)
        elif kind == "content_block_delta":
            self._block_delta(data, frames)
        elif kind == "message_delta":
            delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
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
            detail = data.get("error") if isinstance(data.get("error"), dict) else {}
            self.error = error_to_chat(MessagesErrorDetail.model_validate(detail))["error"]
            frames.append(encode_sse({"error": self.error}))
            frames.append(encode_done())
            self.done = True
        # ping, content_block_stop and future event types carry nothing for chat

    def _block_start(self, data: dict[str, Any], frames: list[bytes]) -> None:
        block = data.get("content_block") if isinstance(data.get("content_block"), dict) else {}
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
        delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
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
            self._id = _chat_id(None)
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
        self.error = {"message": message, "type": kind, "code": None}
        return encode_sse({"error": self.error})


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MessagesRequest",
    "MessagesResponse",
    "MessagesStreamTranslator",
    "MessagesTranslationError",
    "MessagesUsage",
    "UNSUPPORTED_CODE",
    "chat_to_messages",
    "chat_usage",
    "finish_reason",
    "messages_headers",
    "messages_to_chat",
    "messages_url",
]
