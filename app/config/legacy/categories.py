"""Decisions synthesized from a pre-decision flat layout (part of the converter, app/config/legacy).

Before decisions existed, routing was `categories[].model_scores`: the highest-scoring
model of the matched domain won. Each scored category becomes one decision that routes
its domain to that model, with the category's per-domain switches (system prompt,
semantic cache, jailbreak, PII) as the decision's plugins.
"""

from __future__ import annotations

from typing import Any

# Per-category keys the synthesized decision carries; without synthesis they are dropped.
USED_BY_SYNTHESIS = frozenset(
    {
        "system_prompt",
        "use_reasoning",
        "reasoning_effort",
        "reasoning_description",
        "semantic_cache_enabled",
        "semantic_cache_similarity_threshold",
        "jailbreak_enabled",
        "jailbreak_threshold",
        "pii_enabled",
    }
)


def decision_from_category(category: dict[str, Any]) -> dict[str, Any] | None:
    """The decision for one scored category; None when it has no name or no usable score."""
    name = str(category.get("name", ""))
    best = _best_score(category["model_scores"])
    if best is None or not name:
        return None
    ref: dict[str, Any] = {"model": str(best["model"])}
    for key in ("use_reasoning", "reasoning_effort", "reasoning_description", "lora_name"):
        value = best.get(key, category.get(key))
        if value is not None:
            ref[key] = value
    decision: dict[str, Any] = {
        "name": name,
        "description": f"migrated from category {name!r} (model_scores)",
        "rules": {"operator": "OR", "conditions": [{"type": "domain", "name": name}]},
        "modelRefs": [ref],
    }
    plugins = _category_plugins(category)
    if plugins:
        decision["plugins"] = plugins
    return decision


def _best_score(scores: list[Any]) -> dict[str, Any] | None:
    best: dict[str, Any] | None = None
    for entry in scores:
        if not isinstance(entry, dict) or "model" not in entry:
            continue
        score = entry.get("score", 0)
        if not isinstance(score, int | float):
            continue
        if best is None or score > best.get("score", 0):
            best = entry
    return best


def _category_plugins(category: dict[str, Any]) -> list[dict[str, Any]]:
    plugins: list[dict[str, Any]] = []
    if category.get("system_prompt"):
        plugins.append(
            {"type": "system_prompt", "configuration": {"system_prompt": category["system_prompt"]}}
        )
    if category.get("semantic_cache_enabled") is not None:
        cache: dict[str, Any] = {"enabled": bool(category["semantic_cache_enabled"])}
        if category.get("semantic_cache_similarity_threshold") is not None:
            cache["similarity_threshold"] = category["semantic_cache_similarity_threshold"]
        plugins.append({"type": "semantic-cache", "configuration": cache})
    if category.get("jailbreak_enabled") is not None:
        jail: dict[str, Any] = {"enabled": bool(category["jailbreak_enabled"])}
        if category.get("jailbreak_threshold") is not None:
            jail["threshold"] = category["jailbreak_threshold"]
        plugins.append({"type": "jailbreak", "configuration": jail})
    if category.get("pii_enabled") is not None:
        plugins.append({"type": "pii", "configuration": {"enabled": bool(category["pii_enabled"])}})
    return plugins
