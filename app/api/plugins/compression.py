"""The `context_compression` plugin's management views (docs/context-compression.md): capabilities,
health, preview of a candidate or bound configuration, and redacted statistics.

Statistics come from the metrics every Router replica pushes (app/pipeline/metrics.py records
them at route(); the Observability aggregate sums them), so they cover every replica and hold
counts only: requests seen and compressed, turns dropped, tokens saved, per (recipe, decision),
and the plugin's time per request. No message content is ever recorded.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from app.common.mgmt_errors import not_found
from app.config.document import RouterConfig
from app.config.plugins import ContextCompressionPlugin, parse_plugin
from app.config.recipes import DEFAULT_RECIPE, recipe_names, recipe_routing
from app.observability.metrics import CATALOG
from app.pipeline.compression import MESSAGE_OVERHEAD, TOKENIZER_NAME, count_texts
from app.pipeline.compression_preview import CompressionPreview, preview_context_compression
from app.replays.classification_metrics import MetricsReport, TimingSummary, timing_summary

PLUGIN = "context_compression"
MAX_PREVIEW_MESSAGES = 10_000
REQUESTS = "svc_router_context_compression_requests_total"
TURNS = "svc_router_context_compression_turns_dropped_total"
TOKENS = "svc_router_context_compression_tokens_saved_total"
DURATION = "svc_router_context_compression_duration_seconds"


# ------------------------------------------------------------------ wire models


class Binding(BaseModel):
    """A decision of a recipe whose plugins list context_compression."""

    model_config = {"extra": "forbid"}

    recipe: str = Field(DEFAULT_RECIPE, max_length=256)
    decision: str = Field(min_length=1, max_length=256)


def _exactly_one_source(schema: dict[str, Any]) -> None:
    """The documented body says "exactly one" too (no null, oneOf), so a body valid by the
    schema is never refused for it."""
    for name in ("configuration", "binding"):
        field = schema["properties"][name]
        branches = [b for b in field.pop("anyOf", []) if b.get("type") != "null"]
        field.update(branches[0] if branches else {})
    schema["oneOf"] = [{"required": ["configuration"]}, {"required": ["binding"]}]


class PreviewRequest(BaseModel):
    """`configuration` (a candidate) or `binding` (the active one), exactly one."""

    # the schema says "exactly one" too, so a schema-valid body is never refused for it
    model_config = {"extra": "forbid", "json_schema_extra": _exactly_one_source}

    messages: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_PREVIEW_MESSAGES)
    configuration: ContextCompressionPlugin | None = Field(None, description="candidate plugin configuration")
    binding: Binding | None = None
    mode: Literal["preview", "probe"] = "preview"

    @model_validator(mode="after")
    def _one_source(self) -> PreviewRequest:
        if (self.configuration is None) == (self.binding is None):
            raise ValueError("give exactly one of configuration and binding")
        return self


class PreviewAnswer(CompressionPreview):
    binding: Binding | None = None


class Limits(BaseModel):
    max_tokens: tuple[int, int] = (16, 10_000_000)
    keep_last_turns: tuple[int, int] = (1, 10_000)
    summary_max_tokens: tuple[int, int] = (16, 100_000)
    preview_max_messages: int = MAX_PREVIEW_MESSAGES


class Capabilities(BaseModel):
    plugin: str = PLUGIN
    strategies: list[str] = ["drop", "summarize"]
    summarize_method: str = Field(
        "lead_sentence", description="extractive: lead sentence of each dropped user/assistant message"
    )
    model_calls: bool = Field(False, description="compression never calls a model")
    unit: str = Field("turn", description="a user message and its replies; tool calls move with results")
    tokenizer: str = TOKENIZER_NAME
    message_overhead_tokens: int = MESSAGE_OVERHEAD
    modes: list[str] = ["preview", "probe"]
    limits: Limits = Field(default_factory=Limits)
    configuration_schema: dict[str, Any] = Field(default_factory=ContextCompressionPlugin.model_json_schema)


class Health(BaseModel):
    plugin: str = PLUGIN
    status: Literal["ok", "unavailable"]
    tokenizer: str = TOKENIZER_NAME
    tokenizer_loaded: bool
    bindings: int = Field(description="enabled context_compression plugins in the active configuration")
    detail: str | None = None


class DecisionStats(BaseModel):
    recipe: str
    decision: str
    requests_seen: int = 0
    requests_compressed: int = 0
    requests_over_budget: int = 0
    turns_dropped: int = 0
    tokens_saved: int = 0


class Stats(BaseModel):
    plugin: str = PLUGIN
    sources: int = Field(description="processes whose metrics are summed")
    requests_seen: int = 0
    requests_compressed: int = 0
    requests_over_budget: int = Field(0, description="still over budget after compression")
    turns_dropped: int = 0
    tokens_saved: int = 0
    latency: TimingSummary = Field(default_factory=TimingSummary)
    by_decision: list[DecisionStats] = Field(default_factory=list)


# ------------------------------------------------------------------ logic


def capabilities() -> Capabilities:
    return Capabilities()


def bindings_count(config: RouterConfig) -> int:
    count = 0
    for recipe in recipe_names(config):
        routing = recipe_routing(config, recipe)
        for decision in routing.decisions if routing is not None else []:
            for plugin in decision.plugins:
                if plugin.type == PLUGIN and getattr(parse_plugin(plugin), "enabled", False):
                    count += 1
    return count


def health(config: RouterConfig) -> Health:
    try:
        count_texts(["health"])
    except Exception as exc:  # a missing or corrupt tokenizer file: report, never 500
        return Health(status="unavailable", tokenizer_loaded=False, bindings=0, detail=type(exc).__name__)
    return Health(status="ok", tokenizer_loaded=True, bindings=bindings_count(config))


def bound_configuration(config: RouterConfig, binding: Binding) -> ContextCompressionPlugin:
    routing = recipe_routing(config, binding.recipe)
    if routing is None:
        raise not_found(f"recipe {binding.recipe!r} is not configured")
    decision = next((d for d in routing.decisions if d.name == binding.decision), None)
    if decision is None:
        raise not_found(f"decision {binding.decision!r} is not in recipe {binding.recipe!r}")
    plugin = next((p for p in decision.plugins if p.type == PLUGIN), None)
    if plugin is None:
        raise not_found(f"decision {binding.decision!r} has no {PLUGIN} plugin")
    parsed = parse_plugin(plugin)
    assert isinstance(parsed, ContextCompressionPlugin)  # the loader validated it
    return parsed


def preview(config: RouterConfig, request: PreviewRequest) -> PreviewAnswer:
    """404 for a binding that names no configured context_compression plugin."""
    if request.binding is not None:
        settings = bound_configuration(config, request.binding)
    else:
        assert request.configuration is not None  # PreviewRequest: exactly one of the two
        settings = request.configuration
    result = preview_context_compression(settings, request.messages)
    return PreviewAnswer(**(result.model_dump() | {"mode": request.mode}), binding=request.binding)


def stats(report: MetricsReport) -> Stats:
    counters = report.snapshot.counters
    rows: dict[tuple[str, str], DecisionStats] = {}

    def row(recipe: str, decision: str) -> DecisionStats:
        return rows.setdefault((recipe, decision), DecisionStats(recipe=recipe, decision=decision))

    for key, value in counters.get(REQUESTS, {}).items():
        recipe, decision, compressed, over = json.loads(key)
        entry = row(recipe, decision)
        entry.requests_seen += int(value)
        entry.requests_compressed += int(value) if compressed == "true" else 0
        entry.requests_over_budget += int(value) if over == "true" else 0
    for name, attr in ((TURNS, "turns_dropped"), (TOKENS, "tokens_saved")):
        for key, value in counters.get(name, {}).items():
            entry = row(*json.loads(key))
            setattr(entry, attr, getattr(entry, attr) + int(value))
    by_decision = [rows[k] for k in sorted(rows)]
    histogram = report.snapshot.histograms.get(DURATION, {}).get(json.dumps([]))
    return Stats(
        sources=report.sources,
        requests_seen=sum(r.requests_seen for r in by_decision),
        requests_compressed=sum(r.requests_compressed for r in by_decision),
        requests_over_budget=sum(r.requests_over_budget for r in by_decision),
        turns_dropped=sum(r.turns_dropped for r in by_decision),
        tokens_saved=sum(r.tokens_saved for r in by_decision),
        latency=timing_summary(histogram, CATALOG[DURATION].buckets),
        by_decision=by_decision,
    )


__all__ = ["PreviewAnswer", "PreviewRequest", "capabilities", "health", "preview", "stats"]
