"""Configuration documents the store tests and benches share: one upstream model, one
decision (a keyword) with the semantic cache on, the response cache on a given store; and the
shipped configs/config.yaml pointed at a fake upstream."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def served_default(upstream_host_url: str) -> dict[str, Any]:
    """configs/config.yaml with its backends pointed at the fake upstream; nothing else changed."""
    document = yaml.safe_load((ROOT / "configs" / "config.yaml").read_text())
    document = copy.deepcopy(document)  # YAML anchors share objects; edit copies
    for model in document["providers"]["models"]:
        for ref in model["backend_refs"]:
            ref["endpoint"] = upstream_host_url.removeprefix("http://")
    return dict(document)


def redis_store(redis_url: str, namespace: str, **settings: Any) -> dict[str, Any]:
    """`global.stores.response_cache` keys for Redis, with an index and keys of `namespace`'s
    own: tests share one server, and an index another test created (another vector size, a
    flushed epoch) must not be this one's (`settings`: timeout_seconds, ...)."""
    name = "".join(c if c.isalnum() else "_" for c in namespace)
    return {
        "backend_type": "redis",
        "redis": {"url": redis_url, "index_name": name, "key_prefix": f"{name}:", **settings},
    }


def cached_route(upstream_url: str, keyword: str, store: dict[str, Any]) -> dict[str, Any]:
    """Requests naming `keyword` go to decision `cached` (semantic cache on) on model-a;
    `store`: the `global.stores.response_cache` keys that pick and place the backend."""
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "model-a"},
            "models": [{"name": "model-a", "backend_refs": [{"base_url": upstream_url}]}],
        },
        "routing": {
            "signals": {"keywords": [{"name": keyword, "keywords": [keyword]}]},
            "decisions": [
                {
                    "name": "cached",
                    "priority": 10,
                    "rules": {"type": "keyword", "name": keyword},
                    "modelRefs": [{"model": "model-a"}],
                    "plugins": [{"type": "semantic-cache", "configuration": {"enabled": True}}],
                }
            ],
        },
        "global": {
            "stores": {
                "response_cache": {"enabled": True, **store},
            },
            "services": {"observability": {"metrics": {"enabled": False}}},
        },
    }


PRICED = {"currency": "USD", "prompt_per_1m": 1.0, "completion_per_1m": 2.0}


def priced_model(name: str, base_url: str) -> dict[str, Any]:
    """A `providers.models[]` entry at PRICED (1 and 2 USD per million prompt / completion tokens)."""
    return {"name": name, "pricing": dict(PRICED), "backend_refs": [{"base_url": base_url}]}


def learned_signals(embedding: str, threshold: float) -> dict[str, list[dict[str, Any]]]:
    """A signal of each learned family: domain `math`, PII `any_pii`, jailbreak `attack` and the
    embedding `embedding`. A decision referencing them makes every request call the
    DomainClassifier and Guard deployments (and Embedding, unless the Router encodes itself)."""
    return {
        "domains": [{"name": "math", "mmlu_categories": ["math"]}],
        "pii": [{"name": "any_pii", "threshold": 0.5}],
        "jailbreak": [{"name": "attack"}],
        "embeddings": [
            {"name": embedding, "threshold": threshold, "candidates": ["write a python function"]}
        ],
    }


def any_of(*signals: tuple[str, str]) -> dict[str, Any]:
    """A decision rule matching when any of the (type, name) signals matches."""
    return {"operator": "OR", "conditions": [{"type": kind, "name": name} for kind, name in signals]}


KEYED_PRICEY = {"currency": "USD", "prompt_per_1m": 100_000.0, "completion_per_1m": 300_000.0}
KEYED_CHEAP = {"currency": "USD", "prompt_per_1m": 100.0, "completion_per_1m": 300.0}


def keyed(
    base_url: str,
    *,
    required: bool = True,
    listener_port: int = 8801,
    other: bool = True,
    listener_models: list[str] | None = None,
) -> dict[str, Any]:
    """The API-key tests' document (docs/security.md "Keys and budgets"): MoM's default is the
    expensive `pricey` (a few dollars a request), `cheap` a thousandth of it, `other` unpriced;
    keys past half their budget step down (`step_down_at` 0.5). `listener_models`: the
    listener's public model grants (None: none)."""
    ref = [{"base_url": base_url}]
    models = [
        {"name": "pricey", "backend_refs": ref, "pricing": dict(KEYED_PRICEY)},
        {"name": "cheap", "backend_refs": ref, "pricing": dict(KEYED_CHEAP)},
    ]
    if other:
        models.append({"name": "other", "backend_refs": ref})
    return {
        "version": "v0.3",
        "listeners": [
            {
                "name": "http",
                "port": listener_port,
                "api_key_required": required,
                **({} if listener_models is None else {"models": listener_models}),
            }
        ],
        "providers": {"defaults": {"default_model": "pricey"}, "models": models},
        "global": {"services": {"api_keys": {"step_down_at": 0.5, "cache_seconds": 0}}},
    }


# Prefix-cache prices (USD per 1M tokens) the session-aware routing tests and bench route at.
CACHE_PRICED = {
    "prompt_per_1m": 3.0,
    "cached_input_per_1m": 0.3,
    "cache_write_per_1m": 3.75,
    "completion_per_1m": 15,
}


def keyword_routing(
    base_url: str, routes: list[tuple[str, int, list[str], str]], default: str, **session_affinity: Any
) -> dict[str, Any]:
    """A document of keyword decisions at CACHE_PRICED: each route (name, priority, keywords,
    model) is a keyword rule and a decision of that name to that model, `default` the default
    model, every model at `base_url`; `session_affinity` (settings) enables session-aware routing."""
    models = list(dict.fromkeys([default, *(model for *_, model in routes)]))
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": default},
            "models": [
                {"name": m, "pricing": dict(CACHE_PRICED), "backend_refs": [{"base_url": base_url}]}
                for m in models
            ],
        },
        "routing": {
            "strategy": "priority",
            "signals": {
                "keywords": [
                    {"name": name, "operator": "OR", "keywords": words} for name, _, words, _ in routes
                ]
            },
            "decisions": [
                {
                    "name": name,
                    "priority": priority,
                    "rules": any_of(("keyword", name)),
                    "modelRefs": [{"model": model}],
                }
                for name, priority, _, model in routes
            ],
        },
        "global": {"router": {"session_affinity": {"enabled": True, **session_affinity}}}
        if session_affinity
        else {},
    }
