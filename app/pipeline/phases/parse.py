"""Phase `parse`: the RoutePlan a chat body starts, and the SignalContext the signal
evaluators share.

The body arrives validated and is not checked again: a front door decoded and validated it
once (app/exchange/openai_schemas.py `parse_chat_body`; the routing preview's `PreviewRequest`
is the same model; the CLI's local preview validates what it builds with it) and the Router
hop only pickled it. A caller of `RouterPipeline.route()` in process (the benchmark, tests) passes a
body it built, or one `validate_chat_body` returned.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from app.pipeline.plan import RoutePlan
from app.pipeline.plugins import CACHE_CONTROL_HEADER
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import EmbedFn, SignalContext

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


def new_plan(
    body: Mapping[str, Any], headers: Mapping[str, str], request_id: str | None, auto_names: Collection[str]
) -> RoutePlan:
    """The plan of a validated chat body (the plan holds a shallow copy of it); `auto` when it
    names an auto model (MoM, ...)."""
    started_at = time.time()
    model_name = body["model"]
    tools = body.get("tools")
    # RoutePlan's `body: dict[str, Any]` checks the top level only (and copies it); the chat
    # fields are not validated again. (model_construct would skip that, yet costs more: pydantic
    # inspects each default factory's signature on every call.)
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
    plan: RoutePlan,
    headers: Mapping[str, str],
    services: PipelineServices,
    *,
    prefetch_vector: bool,
    semantic_embed: EmbedFn | None = None,
) -> SignalContext:
    """The evaluators' shared inputs. With `prefetch_vector` (the response cache will look the
    query up) the cache's embedding starts now, overlapping the signals, unless the client
    bypasses the cache. `semantic_embed`: the `embedding` binding's encoder (None: the graph's)."""
    ctx = SignalContext(
        plan.body["messages"],
        embed=services.embed,
        count_tokens=services.count_tokens,
        headers=headers,
        body=plan.body,
        semantic_embed=semantic_embed,
    )
    if prefetch_vector and "bypass" not in headers.get(CACHE_CONTROL_HEADER, ""):
        ctx.start_semantic_vector()
    return ctx
