"""OpenAI chat wire models and request validation with the reference router's messages.

Unknown OpenAI parameters pass through (`extra="allow"`), so new client options reach
the backend without a code change; only what routing relies on is checked.

A chat body is decoded and validated once, at the front door (`parse_chat_body`; a Responses
request's translation by `validate_chat_body`), and travels on as that validated dict: the
Router hop pickles it and `RouterPipeline.route()` trusts it (app/pipeline/phases/parse.py).
The text a request carries (content text, the human's ask) is app/common/chat_text.py's.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.common.api_docs import NON_BLANK
from app.common.body_limits import DEFAULT_MAX_DEPTH, JsonRejected, decode_json, rejection_message
from app.common.errors import SvcError, bad_request, validation_message


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1, pattern=NON_BLANK)
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, pattern=NON_BLANK, description="a backend model name, MoM or auto")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = Field(None, description="true: the answer is a text/event-stream")
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None

    @field_validator("model")
    @classmethod
    def _strip_model(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must be a non-empty string")
        return value


def parse_chat_body(raw: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """A /v1/chat/completions body, decoded (app/common/body_limits.py) and validated
    (`validate_chat_body`); raises SvcError 400 with a precise message."""
    try:
        data = decode_json(raw, max_depth)
    except JsonRejected as exc:
        raise json_rejected(exc) from None
    return validate_chat_body(data)


def json_rejected(exc: JsonRejected) -> SvcError:
    """The data plane's 400 for a body `decode_json` refused (the reference router's words for
    one that is not JSON at all)."""
    return bad_request(
        "malformed JSON body" if exc.malformed else rejection_message(exc), code="invalid_json"
    )


def validate_chat_body(data: Any) -> dict[str, Any]:
    """`data` checked as a chat body (ChatCompletionRequest) and returned as the client sent
    it, unknown fields included, with the model name stripped (in place); raises SvcError 400.
    The hand checks first give the reference router's messages for the commonest mistakes."""
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    if "messages" not in data or data["messages"] is None:
        raise bad_request("messages field is required", param="messages")
    messages = data["messages"]
    if not isinstance(messages, list):
        raise bad_request("messages field must be an array", param="messages")
    if not messages:
        raise bad_request("messages field must contain at least one message", param="messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object", param=where)
        role = message.get("role")
        if not isinstance(role, str) or not role.strip():
            raise bad_request(
                f"{where}.role is required and must be a non-empty string", param=f"{where}.role"
            )
    model = data.get("model")
    if model is None:
        raise bad_request("model field is required", param="model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("model field must be a non-empty string", param="model")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        message, path = validation_message(_indexed(exc.errors()))
        raise bad_request(message, param=path) from None
    # The dict, not the model's dump: what the client sent passes on untouched (a dump would
    # rewrite coerced values), and without a copy.
    data["model"] = request.model
    return data


def _indexed(errors: list[Any]) -> list[dict[str, Any]]:
    # ("messages", 2, "content") reads better as messages[2].content.
    out = []
    for error in errors:
        loc: list[str] = []
        for part in error.get("loc", ()):
            if isinstance(part, int) and loc:
                loc[-1] = f"{loc[-1]}[{part}]"
            else:
                loc.append(str(part))
        out.append({**error, "loc": tuple(loc)})
    return out


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "svc-sr"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)

    @classmethod
    def of(cls, names: list[str], owned_by: str = "svc-sr") -> ModelList:
        created = int(time.time())
        unique = list(dict.fromkeys(names))
        return cls(data=[ModelCard(id=n, created=created, owned_by=owned_by) for n in unique])


# -- answers (what the front doors document; a backend's own fields pass through) ----------
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class SecurityChecks(_Open):
    pii_detected: bool
    jailbreak_detected: bool
    unscanned: list[str] | None = Field(None, description="safety signals a model runtime did not scan")


class RoutingMetadata(_Open):
    """`routing_metadata` of an answer (app/exchange/answer.py builds it)."""

    selected_model: str | None = None
    recipe: str | None = Field(
        None, description="the recipe that routed an auto request (`default`: MoM/auto)"
    )
    decision: str | None = None
    reason_code: str | None = None
    confidence: float | None = None
    processing_time_ms: float
    cache_hit: bool
    security_checks: SecurityChecks
    cost: float | None = None


class ChatCompletion(_Open):
    """A chat.completion: the backend's answer (or the router's own: cache hit, fast response)."""

    id: str | None = None
    object: str = Field(description="chat.completion")
    created: int | None = None
    model: str | None = None
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None
    routing_metadata: RoutingMetadata | None = None


class ResponseObject(_Open):
    """A Responses object (object "response"), translated from the chat answer."""

    id: str
    object: Literal["response"]
    created_at: int
    model: str
    status: str
    output: list[dict[str, Any]]
    output_text: str | None = None
    usage: dict[str, Any] | None = None
    routing_metadata: RoutingMetadata | None = None


__all__ = [
    "ChatCompletion",
    "ChatCompletionRequest",
    "ChatMessage",
    "ModelCard",
    "ModelList",
    "ResponseObject",
    "RoutingMetadata",
    "SvcError",
    "json_rejected",
    "parse_chat_body",
    "validate_chat_body",
]
