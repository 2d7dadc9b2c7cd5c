"""Chat completions request -> a messages-style request (`POST /v1/messages`).

`chat_to_messages(chat_body, upstream_model)`: system/developer messages -> `system`;
tool calls -> `tool_use` blocks; `role: tool` messages -> `tool_result` blocks in a
user turn; consecutive same-role turns are merged (the messages API wants user/assistant
alternation); tools, tool_choice, max_tokens (required upstream: DEFAULT_MAX_TOKENS when
the chat request has none), stop, temperature (clamped to the messages range 0..1),
top_p, top_k, stream, user. Parameters with no messages counterpart that do not change
the answer's meaning (penalties, seed, logit_bias, logprobs, stream_options,
reasoning_effort, chat_template_kwargs, ...) are dropped; input that cannot be expressed
(n > 1, response_format json, audio, legacy functions, bad tool arguments) raises
`MessagesTranslationError` (status 400).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.upstream.json_fields import object_field
from app.upstream.messages_api import MessagesTranslationError

DEFAULT_MAX_TOKENS = 4096
MAX_TEMPERATURE = 1.0  # the messages API refuses more; OpenAI allows up to 2
_DATA_URL = re.compile(
    r"^data:(?P<media>[\w.+-]+/[\w.+-]+)(?P<params>(?:;[^,;]*)*?);base64,(?P<data>.*)$", re.S
)


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
    request.update(_sampling(chat_body))
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


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """stop_sequences, temperature (clamped to the messages range), top_p and top_k, when set."""
    out: dict[str, Any] = {}
    stops = _stop_sequences(body.get("stop"))
    if stops:
        out["stop_sequences"] = stops
    temperature = _number(body, "temperature")
    if temperature is not None:
        out["temperature"] = min(max(temperature, 0.0), MAX_TEMPERATURE)
    top_p = _number(body, "top_p")
    if top_p is not None:
        out["top_p"] = top_p
    top_k = body.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0:
        out["top_k"] = top_k
    return out


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
        role, blocks = _turn(message, where)
        if not blocks:
            continue  # e.g. an empty assistant turn: the messages API refuses empty text
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # tool results of parallel calls share one user turn
        else:
            turns.append({"role": role, "content": blocks})
    if not turns:
        raise MessagesTranslationError("messages must contain at least one user or assistant message")
    return "\n\n".join(system), turns


def _turn(message: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    """A user, assistant or tool message as (messages role, content blocks)."""
    role = message.get("role")
    if role == "user":
        return "user", _user_blocks(message.get("content"), where)
    if role == "assistant":
        return "assistant", _assistant_blocks(message, where)
    if role == "tool":
        return "user", [_tool_result(message, where)]
    if role == "function":
        raise MessagesTranslationError(f"{where}: legacy role 'function' is not supported; use tools")
    raise MessagesTranslationError(f"{where}.role {role!r} is not supported")


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
        file = object_field(part, "file")
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


__all__ = ["DEFAULT_MAX_TOKENS", "MAX_TEMPERATURE", "MessagesRequest", "chat_to_messages"]
