"""Model inventory (spec 1 "Inventory and metrics" and the older /info views).

`InventoryBackend` is what the API reads. `LocalInventory` describes the built-in models
from their cards and the live configuration without loading anything; the Ray graph can
pass a backend that asks its deployments instead.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from functools import lru_cache
from typing import Any, Protocol

from app.config.models import RouterConfig
from app.management.startup import StartupTracker


class InventoryBackend(Protocol):
    async def models(self) -> list[dict[str, Any]]: ...

    async def embedding_models(self) -> list[dict[str, Any]]: ...

    async def model_runtime(self) -> list[dict[str, Any]]: ...


class ConfigSource(Protocol):
    def current(self) -> RouterConfig: ...


@lru_cache(maxsize=1)
def _cards() -> list[dict[str, Any]]:
    from app.runtime.registry import list_builtin_models

    return [card.model_dump(mode="json") for card in list_builtin_models()]


def precision_of(engine: str | None) -> str:
    """Weights' precision of an engine: int8 (dynamic ONNX build) or fp32 (torch, rules)."""
    return "int8" if engine == "onnxruntime" else "fp32"


def binding_of(card: dict[str, Any]) -> dict[str, Any]:
    """A built-in card as an inventory binding with spec 1's input-limit fields."""
    limits = card.get("limits") or {}
    out: dict[str, Any] = {
        "name": card["name"],
        "task": card["task"],
        "recipe": "default",
        "provider": "svc-sr",
        "device": card.get("device", "cpu"),
        "precision": precision_of(card.get("engines", [None])[0]),
        "engines": card.get("engines", []),
        "labels": card.get("labels", []),
        "status": card.get("status"),
        "description": card.get("description"),
    }
    fields = {
        "forward_max_tokens": limits.get("truncate_tokens"),
        "input_max_tokens": limits.get("max_input_tokens"),
        "document_max_tokens": limits.get("max_scan_tokens"),
    }
    out.update({k: v for k, v in fields.items() if v is not None})
    if limits.get("max_input_tokens") is not None:
        out["max_sequence_length"] = limits["max_input_tokens"]
    return out


class LocalInventory:
    def __init__(self, startup: StartupTracker | None = None) -> None:
        self.startup = startup

    async def models(self) -> list[dict[str, Any]]:
        return [binding_of(card) for card in _cards()]

    async def embedding_models(self) -> list[dict[str, Any]]:
        return [
            {
                **binding_of(card),
                "dimensions": card.get("dimensions", []),
                "representation": card.get("representation"),
            }
            for card in _cards()
            if card["task"] == "embeddings"
        ]

    async def model_runtime(self) -> list[dict[str, Any]]:
        if self.startup is None:
            return []
        status = self.startup.status(detail=True)
        return [m.model_dump() for m in status.model_deployments or []]


def classifier_view(config: RouterConfig) -> dict[str, Any]:
    """GET /api/v1/inventory/classifier: what the live configuration asks of the classifiers."""
    signals = config.routing.signals
    catalog = config.global_.model_catalog
    return {
        "domains": [d.model_dump(mode="json", exclude_none=True) for d in signals.domains],
        "pii": [p.model_dump(mode="json", exclude_none=True) for p in signals.pii],
        "jailbreak": [j.model_dump(mode="json", exclude_none=True) for j in signals.jailbreak],
        "embeddings": [e.model_dump(mode="json", exclude_none=True) for e in signals.embeddings],
        "keywords": [k.name for k in signals.keywords],
        "decisions": [
            {
                "name": d.name,
                "priority": d.priority,
                "tier": d.tier,
                "models": [ref.model for ref in d.modelRefs],
            }
            for d in config.routing.decisions
        ],
        "model_catalog": catalog,
    }


def legacy_info_models(bindings: list[dict[str, Any]], config: RouterConfig) -> dict[str, Any]:
    """GET /info/models (older contract)."""
    categories = [d.name for d in config.routing.signals.domains]
    models = [
        {
            "name": b["name"],
            "type": b["task"],
            "loaded": b.get("status") == "available",
            "model_path": b["name"],
            "categories": categories if b["name"] == "domain-classifier" else [],
            "metadata": {k: v for k, v in b.items() if k not in ("name", "task", "status")},
        }
        for b in bindings
    ]
    return {"models": models, "system": system_info()}


def system_info() -> dict[str, Any]:
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "go_version": f"python{sys.version_info.major}.{sys.version_info.minor}",  # field name of the older contract
        "architecture": platform.machine(),
        "os": sys.platform,
        "memory_usage": f"{rss_kb / 1024:.1f} MiB (peak RSS)",
        "gpu_available": False,
        "cpus": os.cpu_count(),
    }


def legacy_info_classifier(config: RouterConfig) -> dict[str, Any]:
    """GET /info/classifier (older contract)."""
    from app.models.pii import PII_ENTITY_TYPES

    signals = config.routing.signals
    guard = (config.global_.model_catalog.get("modules") or {}).get("prompt_guard") or {}
    cache = config.global_.stores.response_cache
    return {
        "status": "active",
        "capabilities": [
            "intent_classification",
            "pii_detection",
            "security_detection",
            "similarity_matching",
        ],
        "categories": [
            {"name": d.name, "description": d.description, "threshold": d.threshold} for d in signals.domains
        ],
        "decisions": [
            {
                "name": d.name,
                "description": d.description,
                "priority": d.priority,
                "reasoning_enabled": any(ref.use_reasoning for ref in d.modelRefs),
            }
            for d in config.routing.decisions
        ],
        "pii_types": list(PII_ENTITY_TYPES),
        "security": {
            "jailbreak_detection": bool(guard.get("enabled")) or bool(signals.jailbreak),
            "detection_types": ["jailbreak", "prompt_injection"],
            "enabled": bool(guard.get("enabled")) or bool(signals.jailbreak),
        },
        "performance": {"average_latency_ms": None, "requests_handled": None, "cache_enabled": cache.enabled},
        "configuration": {
            "category_threshold": next(
                (d.threshold for d in signals.domains if d.threshold is not None), None
            ),
            "pii_threshold": next((p.threshold for p in signals.pii), None),
            "similarity_threshold": cache.similarity_threshold,
            "use_cpu": True,
        },
    }
