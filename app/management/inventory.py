"""Model inventory (docs/management-api.md, and the older /info views).

`InventorySource` is what the API reads. `LocalInventory` lists the prepared bindings from
their one typed description (app/management/graph_schemas.py) and the live configuration (a
binding the configuration gives a `model_deployments` entry is that deployment's), with the
live facts a `RuntimeFactsProvider` reports (app/management/live_inventory.py: readiness,
restarts, the device each deployment's process runs on); without a provider (tests, offline
tools) those facts are unknown and the device is the graph's CPU default.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from app.config.document import RouterConfig
from app.config.model_deployments import BINDINGS, ModelBinding, read_bindings
from app.management.graph_schemas import DEVICE, GRAPH_MODELS, card_summary, describe
from app.management.live_inventory import DeploymentFacts, RuntimeFactsProvider, uses_gpu
from app.management.startup import StartupTracker

# `reranker` is the typed routes' name of the `rag.reranker` binding: listed once.
INVENTORY_BINDINGS = tuple(name for name in GRAPH_MODELS if name != "reranker")


class InventorySource(Protocol):
    async def models(self) -> list[dict[str, Any]]: ...

    async def embedding_models(self) -> list[dict[str, Any]]: ...

    async def model_runtime(self) -> list[dict[str, Any]]: ...

    async def gpu_available(self) -> bool: ...


class ConfigSource(Protocol):
    def current(self) -> RouterConfig: ...


def _device(facts: DeploymentFacts | None) -> str:
    if facts is None or not facts.devices:
        return DEVICE
    return next((d for d in facts.devices if d.startswith("cuda")), facts.devices[0])


def graph_entry(name: str, facts: DeploymentFacts | None) -> dict[str, Any]:
    """A graph binding with the inventory's input-limit fields and its deployment's live facts."""
    binding = describe(name)
    limits = binding.limits
    return {
        "name": binding.model,
        "binding": name,
        "task": binding.task,
        "recipe": binding.recipe,
        "provider": binding.provider,
        "deployment": binding.deployment,
        "device": _device(facts),
        "local": True,
        "precision": binding.precision,
        "engine": binding.engine,
        "labels": binding.labels,
        "status": binding.status,
        "ready": facts.ready if facts is not None else None,
        "restarts": facts.restarts if facts is not None else None,
        "card": card_summary(GRAPH_MODELS[name].card),
        "forward_max_tokens": limits.forward_max_tokens,
        "input_max_tokens": limits.input_max_tokens,
        "document_max_tokens": limits.document_max_tokens,
        "max_sequence_length": limits.input_max_tokens,  # legacy: the effective input limit
        "dimensions": binding.dimensions,
        "representation": binding.representation,
    }


def runtime_entry(name: str, binding: ModelBinding, config: RouterConfig) -> dict[str, Any]:
    """A binding the configuration gives a model-runtime deployment (placement as configured:
    its workers run in the Router replicas' supervisors)."""
    deployment = binding.deployment
    dep = config.model_deployments[deployment]
    spec = config.rule_binding_specs().get(name) or BINDINGS[name]
    placements = dep.placements()
    devices = [p.device for p in placements if p.device is not None]
    entry: dict[str, Any] = {
        "name": dep.artifact,
        "binding": name,
        "task": binding.contract or spec.contracts[0],
        "family": spec.family,
        "recipe": "default",
        "provider": "model_runtime",
        "deployment": deployment,
        "device": next((d for d in devices if d.startswith("cuda")), devices[0] if devices else "remote"),
        "local": bool(devices),  # an attached endpoint runs elsewhere
        "process": dep.process,
        "endpoints": [p.endpoint for p in placements if p.endpoint is not None],
        "status": "configured",
        "ready": None,
        "restarts": None,
    }
    if dep.input is not None and dep.input.max_tokens is not None:
        entry["input_max_tokens"] = entry["max_sequence_length"] = dep.input.max_tokens
    return entry


class LocalInventory:
    def __init__(
        self,
        startup: StartupTracker | None = None,
        facts: RuntimeFactsProvider | None = None,
        config: Callable[[], RouterConfig] | None = None,
    ) -> None:
        self.startup = startup
        self.facts = facts
        self.config = config

    async def _facts(self) -> Mapping[str, DeploymentFacts]:
        return await self.facts.facts() if self.facts is not None else {}

    async def models(self) -> list[dict[str, Any]]:
        facts = await self._facts()
        config = self.config() if self.config is not None else None
        bound = read_bindings(config.global_.model_catalog) if config is not None else {}
        out = []
        for name in INVENTORY_BINDINGS:
            binding = bound.get(name)
            if binding is not None and config is not None:
                out.append(runtime_entry(name, binding, config))
            else:
                out.append(graph_entry(name, facts.get(GRAPH_MODELS[name].deployment)))
        if config is not None:
            out += [runtime_entry(name, b, config) for name, b in bound.items() if name not in GRAPH_MODELS]
        return out

    async def embedding_models(self) -> list[dict[str, Any]]:
        """What serves the `embedding` binding: its bound deployment, else the graph's encoder."""
        config = self.config() if self.config is not None else None
        binding = read_bindings(config.global_.model_catalog).get("embedding") if config is not None else None
        if binding is not None and config is not None:
            return [runtime_entry("embedding", binding, config)]
        facts = await self._facts()
        return [graph_entry("embedding", facts.get(GRAPH_MODELS["embedding"].deployment))]

    async def model_runtime(self) -> list[dict[str, Any]]:
        """Every graph deployment: process, readiness, restarts, devices, served model cards."""
        facts = await self._facts()
        listed = self.startup.status(detail=True).model_deployments or [] if self.startup else []
        names = [m.name for m in listed] + sorted(set(facts) - {m.name for m in listed})
        status = {m.name: m.model_dump() for m in listed}
        out = []
        for name in names:
            live = facts.get(name)
            cards = {GRAPH_MODELS[b].card for b in GRAPH_MODELS if GRAPH_MODELS[b].deployment == name}
            entry = status.get(name) or {"name": name, "artifact": None, "process": "ray_serve"}
            entry.setdefault("state", "ready" if live is not None and live.ready else "loading")
            entry.setdefault("ready", bool(live is not None and live.ready))
            entry.setdefault("reason", None)
            entry |= {
                "replicas": live.replicas if live is not None else None,
                "replica_starts": live.replica_starts if live is not None else None,
                "restarts": live.restarts if live is not None else None,
                "devices": live.devices if live is not None else [],
                "model_cards": [c for c in (card_summary(card) for card in sorted(cards, key=str)) if c],
            }
            out.append(entry)
        return out

    async def gpu_available(self) -> bool:
        """True exactly when an active prepared binding uses local GPU execution."""
        return uses_gpu(m["device"] for m in await self.models() if m.get("local"))


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


def legacy_info_models(
    bindings: list[dict[str, Any]], config: RouterConfig, gpu_available: bool = False
) -> dict[str, Any]:
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
    return {"models": models, "system": system_info(gpu_available)}


def system_info(gpu_available: bool = False) -> dict[str, Any]:
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "go_version": f"python{sys.version_info.major}.{sys.version_info.minor}",  # field name of the older contract
        "architecture": platform.machine(),
        "os": sys.platform,
        "memory_usage": f"{rss_kb / 1024:.1f} MiB (peak RSS)",
        "gpu_available": gpu_available,
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
