"""OpenAI Responses API request -> a chat-completions body (spec: "Responses-style request").

`responses_to_chat(req)` maps input items, instructions, tools, tool_choice, text.format
and reasoning.effort. Built-in tools (web_search, file_search, ...) cannot be expressed as a
chat call, nor `previous_response_id` without the stored conversation (`previous_messages`,
which the Responses store of the front door resolves); they raise `ResponsesInputError`
(a ValueError: answer 400). An `input_image` part with a `file_id` (an image uploaded with
purpose=vision) becomes a chat `image_url` part with a data URL when `images` holds that file
(resolved by the front door beforehand: `app.exchange.responses.images`), else it is refused.
The answer's way back (chat -> Responses objects and events) is `answer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from app.common.api_docs import NON_BLANK
from app.exchange.responses.images import ImageFile

Images = Mapping[str, ImageFile]  # file id -> the uploaded image (resolve_input_images)

# Chat parameters that mean the same in both APIs and are copied when present.
_PASSTHROUGH = ("temperature", "top_p", "user", "seed", "stop", "presence_penalty", "frequency_penalty")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class ResponsesInputError(ValueError):
    """The Responses request cannot be translated to a chat completion."""


# What the translation below accepts, as schemas: the items are read as dicts (their checks
# raise ResponsesInputError), so these only describe them, for the OpenAPI document.
_NAME = {"type": "string", "minLength": 1}
_PARTS = {
    "type": "array",
    "items": {
        "anyOf": [
            {"type": "object", "required": ["type"], "properties": {"type": {"enum": sorted(_TEXT_PARTS)}}},
            {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["refusal"]}}},
            {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["input_image"]},
                    "image_url": _NAME,
                    "file_id": {**_NAME, "description": "an image uploaded with purpose=vision"},
                    "detail": {"type": "string", "description": "kept as the chat part's detail"},
                },
                "anyOf": [{"required": ["image_url"]}, {"required": ["file_id"]}],
            },
            {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["input_file"]}, "file_data": _NAME, "file_id": _NAME},
                "anyOf": [{"required": ["file_data"]}, {"required": ["file_id"]}],
            },
        ]
    },
}
_INPUT_ITEMS = [
    {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "type": {"enum": ["message"]},
            "role": {"enum": ["user", "system", "developer", "assistant"]},
            "content": {"anyOf": [{"type": "string"}, _PARTS]},
        },
    },
    {
        "type": "object",
        "required": ["type", "call_id", "name"],
        "properties": {"type": {"enum": ["function_call"]}, "call_id": _NAME, "name": _NAME},
    },
    {
        "type": "object",
        "required": ["type", "call_id", "output"],
        "properties": {
            "type": {"enum": ["function_call_output"]},
            "call_id": _NAME,
            "output": {"anyOf": [{"type": "string"}, _PARTS]},
        },
    },
]
INPUT_SCHEMA = {
    "description": "text, or input items (reasoning items are accepted too, and dropped)",
    "anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"anyOf": _INPUT_ITEMS}}],
}
TOOLS_SCHEMA = {
    "type": "array",
    "description": "function tools only (Responses or chat shape)",
    "items": {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": ["function"]}, "name": _NAME},
        "anyOf": [{"required": ["name"]}, {"required": ["function"]}],
    },
}
TOOL_CHOICE_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "object",
            "required": ["type", "name"],
            "properties": {"type": {"enum": ["function"]}, "name": _NAME},
        },
        {"type": "object", "required": ["function"]},
    ]
}
TEXT_SCHEMA = {
    "type": "object",
    "properties": {
        "format": {
            "type": "object",
            "properties": {"type": {"enum": ["text", "json_object", "json_schema"]}},
        }
    },
}


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, pattern=NON_BLANK)
    input: Annotated[str | list[dict[str, Any]], WithJsonSchema(INPUT_SCHEMA)]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    tools: Annotated[list[dict[str, Any]] | None, WithJsonSchema(TOOLS_SCHEMA)] = None
    tool_choice: Annotated[str | dict[str, Any] | None, WithJsonSchema(TOOL_CHOICE_SCHEMA)] = None
    parallel_tool_calls: bool | None = None
    text: Annotated[dict[str, Any] | None, WithJsonSchema(TEXT_SCHEMA)] = None
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    store: bool | None = None
    previous_response_id: str | None = Field(
        None,
        description="continue the conversation of a stored response (global.services.response_api: "
        "an unknown or expired id answers 404, a disabled store 400)",
    )
    # Copied into the chat request, which takes them with these types.
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


# -- request: Responses -> chat ----------------------------------------------------------
def responses_to_chat(
    req: ResponsesRequest,
    previous_messages: list[dict[str, Any]] | None = None,
    images: Images | None = None,
) -> dict[str, Any]:
    """Chat-completions body for `req`; `previous_messages` resolves previous_response_id,
    `images` the input_image parts' file ids."""
    body: dict[str, Any] = {"model": req.model, "messages": _conversation(req, previous_messages, images)}
    for key in _PASSTHROUGH:
        value = getattr(req, key, None)
        if value is None and req.model_extra:
            value = req.model_extra.get(key)
        if value is not None:
            body[key] = value
    if req.max_output_tokens is not None:
        body["max_tokens"] = req.max_output_tokens
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if req.tools:
        body["tools"] = [_chat_tool(tool, i) for i, tool in enumerate(req.tools)]
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.tool_choice is not None:
        body["tool_choice"] = _chat_tool_choice(req.tool_choice)
    response_format = _response_format(req.text)
    if response_format:
        body["response_format"] = response_format
    effort = (req.reasoning or {}).get("effort")
    if isinstance(effort, str):
        body["reasoning_effort"] = effort
    return body


def _conversation(
    req: ResponsesRequest, previous_messages: list[dict[str, Any]] | None, images: Images | None
) -> list[dict[str, Any]]:
    """instructions, the previous turns, then the input, as chat messages."""
    if req.previous_response_id and previous_messages is None:
        raise ResponsesInputError(
            "previous_response_id needs the Response API store; resend the conversation in `input`"
        )
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    messages.extend(previous_messages or [])
    messages.extend(input_messages(req, images))
    if not messages:
        raise ResponsesInputError("input must contain at least one message")
    return messages


def input_messages(req: ResponsesRequest, images: Images | None = None) -> list[dict[str, Any]]:
    """The request's input (not its instructions) as chat messages."""
    if isinstance(req.input, str):
        return [{"role": "user", "content": req.input}]
    return _input_messages(req.input, images or {})


def _input_messages(items: list[dict[str, Any]], images: Images) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise ResponsesInputError(f"{where} must be an object")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, where, images))
        elif kind == "function_call":
            call = {
                "id": _required_str(item, "call_id", where),
                "type": "function",
                "function": {
                    "name": _required_str(item, "name", where),
                    "arguments": item.get("arguments") or "",
                },
            }
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and last.get("tool_calls") and not last.get("content"):
                last["tool_calls"].append(call)  # parallel calls share one assistant turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _parts_text(output, where, images)
            messages.append(
                {"role": "tool", "tool_call_id": _required_str(item, "call_id", where), "content": text}
            )
        elif kind == "reasoning":
            continue  # a chat backend cannot take reasoning items back
        else:
            raise ResponsesInputError(f"{where}: input item type {kind!r} is not supported")
    return messages


def _required_str(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise ResponsesInputError(f"{where}.{key} is required")
    return value


def _message(item: dict[str, Any], where: str, images: Images) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise ResponsesInputError(f"{where}.role must be user, system, developer or assistant")
    chat_role = "system" if role == "developer" else role  # most chat templates lack "developer"
    content = item.get("content")
    if isinstance(content, str):
        return {"role": chat_role, "content": content}
    if not isinstance(content, list):
        raise ResponsesInputError(f"{where}.content must be a string or an array of content parts")
    parts = [_chat_part(part, f"{where}.content[{i}]", images) for i, part in enumerate(content)]
    if chat_role != "user" or all(p["type"] == "text" for p in parts):
        # Text-only content as one string: the form every chat backend accepts.
        return {
            "role": chat_role,
            "content": "\n".join(p.get("text", "") for p in parts if p["type"] == "text"),
        }
    return {"role": chat_role, "content": parts}


def _chat_part(part: Any, where: str, images: Images) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise ResponsesInputError(f"{where} must be an object")
    kind = part.get("type")
    if isinstance(kind, str) and kind in _TEXT_PARTS:  # (a dict is no type name, and unhashable)
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "refusal":
        return {"type": "text", "text": str(part.get("refusal") or "")}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            stored = images.get(part.get("file_id") or "")
            if stored is None:
                raise ResponsesInputError(
                    f"{where}: input_image needs image_url (file_id needs the files store)"
                )
            url = stored.data_url()  # OpenAI's chat vision shape: the image inline
        image: dict[str, Any] = {"url": url}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        file: dict[str, Any] = {k: part[k] for k in ("file_data", "file_id", "filename") if part.get(k)}
        if not file.get("file_data") and not file.get("file_id"):
            raise ResponsesInputError(f"{where}: input_file needs file_data or file_id")
        return {"type": "file", "file": file}
    raise ResponsesInputError(f"{where}: content part type {kind!r} is not supported")


def _parts_text(parts: Any, where: str, images: Images) -> str:
    if not isinstance(parts, list):
        raise ResponsesInputError(f"{where}.output must be a string or an array of content parts")
    # A chat tool result is text: its images are dropped (a file_id one is not even read).
    kept = [x for x in parts if not (isinstance(x, dict) and x.get("type") == "input_image")]
    return "\n".join(
        p.get("text", "") for p in (_chat_part(x, where, images) for x in kept) if p["type"] == "text"
    )


def _chat_tool(tool: dict[str, Any], index: int) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise ResponsesInputError(
            f"tools[{index}]: tool type {tool.get('type')!r} is not supported (function only)"
        )
    if "function" in tool:  # already chat-shaped
        return tool
    function = {
        k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None
    }
    if not function.get("name"):
        raise ResponsesInputError(f"tools[{index}].name is required")
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    if "function" in choice:
        return choice
    raise ResponsesInputError(f"tool_choice {choice!r} is not supported")


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise ResponsesInputError(f"text.format type {fmt['type']!r} is not supported")


__all__ = ["ResponsesInputError", "ResponsesRequest", "input_messages", "responses_to_chat"]
