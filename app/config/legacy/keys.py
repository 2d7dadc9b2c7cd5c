"""The flat layout's keys and where each lives in v0.3: the one table of old spellings.

Every alias of a configuration key svc-sr still reads lives here (or in the conversion walk,
app/config/legacy/migrator.py, for the per-rule spellings); the canonical models know only
v0.3 names. docs/configuration.md "Flat layout (v0.1)" is this table in prose.
"""

from __future__ import annotations

from typing import Any

# Sections of the canonical document; their presence means "not the flat layout".
CANONICAL_SECTIONS = frozenset({"listeners", "providers", "routing", "global", "entrypoints", "recipes"})

# Flat signal families -> routing.signals family.
SIGNAL_FAMILIES: dict[str, str] = {
    "keyword_rules": "keywords",
    "embedding_rules": "embeddings",
    "categories": "domains",
    "fact_check_rules": "fact_check",
    "user_feedback_rules": "user_feedbacks",
    "reask_rules": "reasks",
    "preference_rules": "preferences",
    "language_rules": "language",
    "context_rules": "context",
    "structure_rules": "structure",
    "complexity_rules": "complexity",
    "modality_rules": "modality",
    "role_bindings": "role_bindings",
    "jailbreak": "jailbreak",
    "pii": "pii",
}

# Flat keys moved whole to a canonical location (dotted path).
MOVED: dict[str, str] = {
    "default_model": "providers.defaults.default_model",
    "default_reasoning_effort": "providers.defaults.default_reasoning_effort",
    "reasoning_families": "providers.defaults.reasoning_families",
    "strategy": "routing.strategy",
    "decisions": "routing.decisions",
    "model_cards": "routing.modelCards",
    "auto_model_name": "global.router.auto_model_name",
    "auto_model_names": "global.router.auto_model_names",
    "include_config_models_in_list": "global.router.include_config_models_in_list",
    "clear_route_cache": "global.router.clear_route_cache",
    "streamed_body": "global.router.streamed_body",
    "model_selection": "global.router.model_selection",
    "semantic_cache": "global.stores.response_cache",
    "response_cache": "global.stores.response_cache",
    "memory": "global.stores.memory",
    "vector_store": "global.stores.vector_store",
    "prompt_guard": "global.model_catalog.modules.prompt_guard",
    "hallucination_mitigation": "global.model_catalog.modules.hallucination_mitigation",
    "feedback_detector": "global.model_catalog.modules.feedback_detector",
    "modality_detector": "global.model_catalog.modules.modality_detector",
    "embedding_models": "global.model_catalog.embeddings.semantic",
    "external_models": "global.model_catalog.external",
    "api": "global.services.api",
    "response_api": "global.services.response_api",
    "observability": "global.services.observability",
    "router_replay": "global.services.router_replay",
    "authz": "global.services.authz",
    "ratelimit": "global.services.ratelimit",
    "tools": "global.integrations.tools",
    "looper": "global.integrations.looper",
    # Same place in both layouts (the runtime contract's resource schema has them at the top).
    "model_deployments": "model_deployments",
    "decision_model": "decision_model",
}
KEPT_IN_PLACE = frozenset({"default_model", "strategy", "decisions", "model_deployments", "decision_model"})

CLASSIFIER_MODULES: dict[str, str] = {
    "category_model": "domain",
    "pii_model": "pii",
    "mcp_category_model": "mcp",
}

# Keys handled by dedicated code in the conversion walk.
SPECIAL = frozenset({"vllm_endpoints", "model_config", "classifier", "bert_model", "version"})

# Dropped on purpose: svc-sr ships its models in packages and never downloads at run time.
DROPPED_WITH_REASON: dict[str, str] = {
    "mom_registry": "svc-sr does not download models (its models ship in installed packages)",
}

LEGACY_KEYS: frozenset[str] = frozenset(
    {*SIGNAL_FAMILIES, *MOVED, *SPECIAL, *DROPPED_WITH_REASON} - {"version"}
)

# Where each flat key lives in v0.3 (used for hints and the docs' conversion table).
LEGACY_KEY_HOME: dict[str, str] = {
    **{key: f"routing.signals.{family}" for key, family in SIGNAL_FAMILIES.items()},
    **MOVED,
    "vllm_endpoints": "providers.models[].backend_refs",
    "model_config": "providers.models",
    "classifier": "global.model_catalog.modules.classifier",
    "bert_model": "global.model_catalog.embeddings.semantic.bert_model_path",
}

# Per-model keys of `model_config` that describe the model: they go to routing.modelCards.
MODEL_CARD_KEYS = (
    "description",
    "param_size",
    "context_window_size",
    "capabilities",
    "loras",
    "quality_score",
    "modality",
    "tags",
)
MODEL_PASSTHROUGH = (
    "reasoning_family",
    "pricing",
    "provider_model_id",
    "api_format",
    "external_model_ids",
    "reliability",
)
ENDPOINT_KEYS = frozenset({"name", "address", "port", "weight", "models", "protocol"})


def is_legacy(doc: Any) -> bool:
    """True for a mapping in the flat layout: a flat key and no canonical section."""
    if not isinstance(doc, dict):
        return False
    if doc.get("version") == "v0.3" or any(key in doc for key in CANONICAL_SECTIONS):
        return False
    return any(key in LEGACY_KEYS for key in doc)


def mixed_layout_hint(key: str) -> str:
    """The hint for a flat key found at the top of a canonical document ("" for any other key):
    a file mixing both layouts is not converted, so the key is rejected where it stands."""
    if key not in LEGACY_KEY_HOME:
        return ""
    return (
        f"; {key!r} is a flat-layout (v0.1) key, in v0.3 it lives at {LEGACY_KEY_HOME[key]} "
        "(a file mixing both layouts is not converted)"
    )
