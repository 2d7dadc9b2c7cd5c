"""`preview_context_compression(config, messages)`: what the `context_compression` plugin would
forward for a conversation, without routing, persisting or calling anything.

Pure (no I/O, no state): POST /api/v1/plugins/context_compression/preview calls it, and so can
the generic /api/v1/plugins/{type}/preview dispatcher. Each retained message says why it stays
(a system message, one of the last turns, or it fits the budget); each dropped turn names its
message positions and roles. The forwarded messages are returned too: the caller sent them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.config.plugins import ContextCompressionPlugin
from app.pipeline.compression import MESSAGE_OVERHEAD, TOKENIZER_NAME, CompressionPlan, compress, role_of
from app.pipeline.plan import CompressionOutcome


class Retained(BaseModel):
    index: int = Field(description="position in the request's messages")
    role: str
    tokens: int
    reason: Literal["system", "last_turns", "within_budget"]


class DroppedTurn(BaseModel):
    indices: list[int] = Field(description="the turn's messages, positions in the request")
    roles: list[str]
    tokens: int


class CompressionPreview(BaseModel):
    """The plugin's answer for one conversation; `mode`, `persisted` and `backend_calls` as every
    plugin preview reports them (compression calls no backend in either mode)."""

    plugin: Literal["context_compression"] = "context_compression"
    mode: Literal["preview", "probe"] = "preview"
    persisted: bool = Field(False, description="always false: nothing is written")
    backend_calls: int = Field(0, description="always 0: compression is local")
    configuration: ContextCompressionPlugin
    tokenizer: str = TOKENIZER_NAME
    message_overhead_tokens: int = MESSAGE_OVERHEAD
    outcome: CompressionOutcome
    retained: list[Retained]
    dropped: list[DroppedTurn]
    summary_inserted: bool = Field(description="a summary system message stands for the dropped turns")
    messages: list[dict[str, Any]] = Field(description="the messages that would be forwarded")


def preview_context_compression(
    config: ContextCompressionPlugin | Mapping[str, Any], messages: list[dict[str, Any]]
) -> CompressionPreview:
    """Raises pydantic.ValidationError for an invalid candidate configuration."""
    settings = (
        config
        if isinstance(config, ContextCompressionPlugin)
        else ContextCompressionPlugin.model_validate(dict(config))
    )
    forwarded, outcome, plan = compress(messages, settings)
    return CompressionPreview(
        configuration=settings,
        outcome=outcome,
        retained=_retained(plan, settings),
        dropped=[
            DroppedTurn(
                indices=list(turn.indices),
                roles=[role_of(messages[i]) for i in turn.indices],
                tokens=turn.tokens,
            )
            for turn in plan.dropped
        ],
        summary_inserted=plan.summary is not None,
        messages=list(forwarded),
    )


def _retained(plan: CompressionPlan, config: ContextCompressionPlugin) -> list[Retained]:
    dropped = {i for turn in plan.dropped for i in turn.indices}
    last = {
        i for turn in plan.turns[max(0, len(plan.turns) - config.keep_last_turns) :] for i in turn.indices
    }
    pinned = {i for unit in plan.units if unit.pinned for i in unit.indices}
    out = []
    for index, message in enumerate(plan.messages):
        if index in dropped:
            continue
        reason: Literal["system", "last_turns", "within_budget"] = (
            "system" if index in pinned else "last_turns" if index in last else "within_budget"
        )
        out.append(Retained(index=index, role=role_of(message), tokens=plan.tokens[index], reason=reason))
    return out
