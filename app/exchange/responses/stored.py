"""What the Responses API store keeps of one answered request, and how a front door reaches it.

A `StoredResponse` holds the Responses object as the client got it (GET /v1/responses/{id}),
the request's input items in the shapes the OpenAI SDK reads (GET .../input_items) and the
conversation so far as chat messages: the previous response's conversation, this request's
input and the answer. `previous_response_id` continues from there: the stored conversation
goes before the new input, after the new request's own `instructions` (instructions are not
carried over, as with OpenAI).

`ConversationStore` is the store as the exchange's ResponsesApi sees it; the data plane
(app/api/responses_store.py) implements it over the management store's backends.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from pydantic import BaseModel, Field

from app.exchange.responses.request import Images, ResponsesRequest, input_messages
from app.pipeline.plan import ProviderState

_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


class StoredResponse(BaseModel):
    id: str
    created_at: int
    response: dict[str, Any] = Field(description="the Responses object as answered")
    input_items: list[dict[str, Any]] = Field(default_factory=list)
    conversation: list[dict[str, Any]] = Field(
        default_factory=list, description="chat messages: earlier turns, this input, the answer"
    )
    # the model that answered it (a fallback's when the Router's choice failed): a continuation
    # is locked to it (session-aware routing)
    served_model: str | None = None
    owner: str | None = Field(
        default=None, description="the API key id that created it (None: none); only it reads it back"
    )


class ConversationStore(Protocol):
    async def get(self, response_id: str) -> StoredResponse | None:
        """The stored response (None: unknown or expired); raises SvcError when the store is down."""
        ...

    async def put(self, record: StoredResponse) -> None:
        """Keep `record`; a store that is down is logged, never raised."""
        ...


def _item_id(kind: str) -> str:
    return f"{_ID_PREFIX.get(kind, 'item')}_{uuid.uuid4().hex}"


def input_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as listed items: each with an id and a status, message content as
    parts (`input_text`, or `output_text` for an assistant's turn)."""
    raw: list[Any] = (
        [{"type": "message", "role": "user", "content": request.input}]
        if isinstance(request.input, str)
        else list(request.input)
    )
    items: list[dict[str, Any]] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or ("message" if "role" in item else "item")
        entry = {**item, "type": kind, "id": item.get("id") or _item_id(kind)}
        entry.setdefault("status", "completed")
        if kind == "message" and isinstance(item.get("content"), str):
            assistant = item.get("role") == "assistant"
            part: dict[str, Any] = {
                "type": "output_text" if assistant else "input_text",
                "text": item["content"],
            }
            if assistant:
                part["annotations"] = []
            entry["content"] = [part]
        items.append(entry)
    return items


def answer_message(response: dict[str, Any]) -> dict[str, Any]:
    """The assistant's chat message for a Responses object's output (its text and function
    calls, with the call ids the client saw), as the next turn sends it back."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            parts = item.get("content") or []
            text += [
                p.get("text") or "" for p in parts if isinstance(p, dict) and p.get("type") == "output_text"
            ]
        elif item.get("type") == "function_call":
            function = {"name": item.get("name") or "", "arguments": item.get("arguments") or ""}
            calls.append({"id": item.get("call_id") or "", "type": "function", "function": function})
    out: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        out["tool_calls"] = calls
        out["content"] = out["content"] or None
    return out


def stored_response(
    response: dict[str, Any],
    request: ResponsesRequest,
    history: list[dict[str, Any]] | None,
    images: Images | None = None,
    served_model: str | None = None,
    owner: str | None = None,
) -> StoredResponse:
    """The record of one answered request (`history`: the previous response's conversation;
    `images`: its input_image files, kept inline in the conversation as the upstream got them,
    so a continuation does not depend on the file still being there)."""
    kept = {k: v for k, v in response.items() if k != "routing_metadata"}
    return StoredResponse(
        id=str(response["id"]),
        created_at=int(response.get("created_at") or 0),
        response=kept,
        input_items=input_items(request),
        conversation=[*(history or []), *input_messages(request, images), answer_message(response)],
        served_model=served_model,
        owner=owner,
    )


def provider_state(record: StoredResponse) -> ProviderState | None:
    """What a continuation of `record` is tied to: the model that answered it, and whether its
    output carries reasoning items (None: a record kept before the model was)."""
    if not record.served_model:
        return None
    output = record.response.get("output")
    reasoning = isinstance(output, list) and any(
        isinstance(item, dict) and item.get("type") == "reasoning" for item in output
    )
    return ProviderState(model=record.served_model, reasoning=reasoning)
