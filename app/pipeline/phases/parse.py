"""Phase `parse`: the request body, validated as a chat body, the RoutePlan it starts, and
the SignalContext the signal evaluators share."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel

from app.pipeline.plan import RoutePlan
from app.pipeline.plugins import CACHE_CONTROL_HEADER
from app.pipeline.selection import InvalidRequestError
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import SignalContext

# The client's session identity (as the routing preview's preview_context names it; Ray
# Serve's session-affinity header too): it names the session a replay record belongs to
# (/api/v1/observability/replays/trajectory).
SESSION_ID_HEADER = "x-session-id"
MAX_SESSION_ID = 256


def lower_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {k.lower(): v for k, v in (headers or {}).items()}


def session_id_of(headers: Mapping[str, str]) -> str | None:
    """The request's session id (lower-cased `headers`): the stripped `x-session-id`, None when
    absent, blank or longer than MAX_SESSION_ID characters (a trajectory query could not name it)."""
    value = headers.get(SESSION_ID_HEADER, "").strip()
    return value if 0 < len(value) <= MAX_SESSION_ID else None


def chat_body(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """The request as a chat-completions body dict; InvalidRequestError (400) when it lacks
    a model or a non-empty messages array."""
    if isinstance(request, BaseModel):
        to_body = getattr(request, "to_body", None)  # ChatCompletionRequest: the fields the client sent
        body = to_body() if callable(to_body) else request.model_dump(exclude_none=True, by_alias=True)
    elif isinstance(request, Mapping):
        body = dict(request)
    else:
        raise InvalidRequestError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequestError("model field is required")
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("messages field is required")
    if not isinstance(messages, list):
        raise InvalidRequestError("messages field must be an array")
    if not messages:
        raise InvalidRequestError("messages must contain at least one message")
    return body


def new_plan(
    request: BaseModel | Mapping[str, Any],
    headers: Mapping[str, str],
    request_id: str | None,
    auto_names: Collection[str],
) -> RoutePlan:
    """The plan of a validated request; `auto` when it names an auto model (MoM, ...)."""
    started_at = time.time()
    body = chat_body(request)
    model_name = body["model"]
    tools = body.get("tools")
    return RoutePlan(
        request_id=request_id or headers.get("x-request-id") or uuid.uuid4().hex,
        requested_model=model_name,
        auto=model_name in auto_names,
        stream=body.get("stream") is True,
        body=body,
        tools_selected=len(tools) if isinstance(tools, list) else 0,
        started_at=started_at,
        session_id=session_id_of(headers),
    )


def signal_context(
    plan: RoutePlan, headers: Mapping[str, str], services: PipelineServices, *, prefetch_vector: bool
) -> SignalContext:
    """The evaluators' shared inputs. With `prefetch_vector` (the response cache will look the
    query up) the query embedding starts now, overlapping the signals, unless the client
    bypasses the cache."""
    ctx = SignalContext(
        plan.body["messages"],
        embed=services.embed,
        count_tokens=services.count_tokens,
        headers=headers,
        body=plan.body,
    )
    if prefetch_vector and "bypass" not in headers.get(CACHE_CONTROL_HEADER, ""):
        ctx.start_query_vector()
    return ctx
