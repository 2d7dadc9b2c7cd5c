"""The plugin registry projection (GET /api/v1/plugins[/{type}]): every plugin type svc-sr
knows, those it applies (`app.config.plugins.PLUGIN_MODELS`) and those it accepts in configs
without applying (`REFERENCE_ONLY_PLUGIN_TYPES`), each with its phase and operations.

Derived from those two sets, so a type that moves from accepted to applied changes its
descriptor (applied, schema) without an edit here; only descriptions and phases are listed.
"""

from __future__ import annotations

from typing import Any

from app.api.plugins.plugin_schemas import (
    PluginDescriptor,
    PluginDetail,
    PluginOperation,
    PluginPhase,
)
from app.common.mgmt_errors import MgmtError
from app.config.plugins import PLUGIN_KIND, PLUGIN_MODELS
from app.config.routing import REFERENCE_ONLY_PLUGIN_TYPES

BASE = "/api/v1/plugins"
DESCRIPTIONS: dict[str, str] = {
    "system_prompt": "insert or replace the system message",
    "header_mutation": "add, update or delete upstream request headers",
    "fast_response": "answer with a fixed message, no model call",
    "response_cache": "per-decision response cache settings (exact and semantic)",
    "semantic-cache": "older name of response_cache",
    "pii": "block requests carrying PII types not allowed",
    "jailbreak": "block jailbreak attempts",
    "router_replay": "record routing decisions for replay",
    "request_params": "strip blocked parameters, clamp max_tokens and n",
    "tools": "static allow/deny policy on the request's tools by name",
    "tool_selection": "keep the request's tools its last user turn needs (embedding similarity, top_k)",
    "context_compression": "compress long conversations to a token budget",
    "rag": "inject retrieved context",
    "memory": "long-term memory across conversations",
    "hallucination": "detect unsupported claims in the answer",
    "response_jailbreak": "detect jailbreak content in the answer",
    "image_gen": "route image generation requests",
    "shadow_dispatch": "send a copy of the request to a shadow model",
}
PHASES: dict[str, PluginPhase] = {
    "response_cache": "storage",
    "semantic-cache": "storage",
    "memory": "storage",
    "hallucination": "response",
    "response_jailbreak": "response",
    "router_replay": "observability",
    "shadow_dispatch": "observability",
}
# Operated elsewhere (docs/plugins.md): the storage and observability APIs.
ELSEWHERE: dict[str, PluginOperation] = {
    "response_cache": PluginOperation(
        name="storage", method="GET", url="/api/v1/storage/response-cache/stats"
    ),
    "memory": PluginOperation(name="storage", method="GET", url="/api/v1/storage/memories"),
    "router_replay": PluginOperation(name="observability", method="GET", url="/api/v1/observability/replays"),
    "shadow_dispatch": PluginOperation(
        name="observability", method="GET", url="/api/v1/observability/replays"
    ),
}
# Types with a preview, and those of them that also take mode `probe` (a model/service call).
PREVIEW_TYPES = frozenset(
    {
        "system_prompt",
        "request_params",
        "header_mutation",
        "fast_response",
        "rag",
        "tools",
        "tool_selection",
        "context_compression",
        "hallucination",
        "response_jailbreak",
    }
)
PROBE_TYPES = frozenset({"rag", "tools", "tool_selection", "hallucination", "response_jailbreak"})
# Guard, RAG and tool previews read the active binding only (docs/plugins.md).
BINDING_REQUIRED = frozenset({"rag", "tools", "tool_selection", "hallucination", "response_jailbreak"})
GUARD_TYPES = frozenset({"hallucination", "response_jailbreak"})
UNTYPED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "description": "accepted in configurations, not interpreted by svc-sr",
}


def known_types() -> list[str]:
    return sorted(set(PLUGIN_MODELS) | set(REFERENCE_ONLY_PLUGIN_TYPES))


def kind_of(plugin_type: str) -> str:
    """The type an alias names (`semantic-cache` -> `response_cache`)."""
    return PLUGIN_KIND.get(plugin_type, plugin_type)


def descriptor(plugin_type: str) -> PluginDescriptor:
    return PluginDescriptor(**_fields(plugin_type))


def detail(plugin_type: str) -> PluginDetail:
    model = PLUGIN_MODELS.get(plugin_type)
    schema = model.model_json_schema() if model is not None else dict(UNTYPED_SCHEMA)
    return PluginDetail(**_fields(plugin_type), configuration_schema=schema)


def descriptors() -> list[PluginDescriptor]:
    return [descriptor(t) for t in known_types()]


def require_known(plugin_type: str) -> str:
    if plugin_type not in set(known_types()):
        raise MgmtError(
            404,
            f"no plugin type {plugin_type!r} (known: {', '.join(known_types())})",
            code="NOT_FOUND",
        )
    return plugin_type


def _fields(plugin_type: str) -> dict[str, Any]:
    kind = kind_of(plugin_type)
    url = f"{BASE}/{plugin_type}"
    operations = [PluginOperation(name="bindings", method="GET", url=f"{url}/bindings")]
    if plugin_type in PREVIEW_TYPES:
        operations.append(PluginOperation(name="preview", method="POST", url=f"{url}/preview"))
    if plugin_type in PROBE_TYPES:
        operations.append(PluginOperation(name="probe", method="POST", url=f"{url}/preview"))
    if kind in ELSEWHERE:
        operations.append(ELSEWHERE[kind])
    return {
        "type": plugin_type,
        "description": DESCRIPTIONS.get(plugin_type, ""),
        "phase": PHASES.get(plugin_type, "request"),
        "applied": plugin_type in PLUGIN_MODELS,
        "alias_of": kind if kind != plugin_type else None,
        "schema_url": url,
        "bindings_url": f"{url}/bindings",
        "binding_required": plugin_type in BINDING_REQUIRED,
        "operations": operations,
    }
