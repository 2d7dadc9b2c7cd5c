"""The conversion walk: a flat-layout document (v0.1 and earlier) as a canonical v0.3 one.

The flat layout kept everything at the top level (`vllm_endpoints`, `model_config`,
`categories`, `keyword_rules`, `decisions`, `semantic_cache`, ...). Users still have such
files, and the reference router's `config migrate` accepts them, so svc-sr converts them and
says in warnings what it converted and what it dropped: nothing is dropped silently.

Before decisions existed (Sept 2025) routing was `categories[].model_scores` (highest
score wins); such files get one synthesized decision per scored category (categories.py).
Endpoints are converted by endpoints.py; the key tables are keys.py. The one entry point is
`app.config.legacy.migrate`.
"""

from __future__ import annotations

import copy
from typing import Any

from app.config.errors import ConfigError, ConfigIssue, format_path
from app.config.legacy.categories import USED_BY_SYNTHESIS, decision_from_category
from app.config.legacy.endpoints import EndpointError, backend_ref
from app.config.legacy.keys import (
    CLASSIFIER_MODULES,
    DROPPED_WITH_REASON,
    ENDPOINT_KEYS,
    KEPT_IN_PLACE,
    LEGACY_KEYS,
    MODEL_CARD_KEYS,
    MODEL_PASSTHROUGH,
    MOVED,
    SIGNAL_FAMILIES,
)
from app.config.legacy.migration import Migration

# The first warning of every conversion (the loader logs the deprecation beside it).
CONVERTED = "legacy flat layout (v0.1, deprecated) converted to v0.3"


def _set(root: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = root
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


class Migrator:
    """One conversion: run() walks the flat document once; ConfigError names every flat path it
    cannot convert (the rest is left for the canonical validation to judge)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.src = copy.deepcopy(doc)
        self.out: dict[str, Any] = {"version": "v0.3"}
        self.warnings: list[str] = [CONVERTED]
        self.issues: list[ConfigIssue] = []
        self.path_map: list[tuple[str, str]] = []

    # ---------------------------------------------------------------- helpers
    def _issue(self, parts: tuple[str | int, ...], message: str, code: str = "legacy_invalid") -> None:
        self.issues.append(ConfigIssue(path=format_path(parts), message=message, code=code))

    def _list(self, key: str) -> list[Any]:
        value = self.src.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self._issue((key,), f"must be a list, got {type(value).__name__}")
            return []
        return value

    def _map(self, key: str) -> dict[str, Any]:
        value = self.src.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self._issue((key,), f"must be a mapping, got {type(value).__name__}")
            return {}
        return value

    # ---------------------------------------------------------------- run
    def run(self) -> Migration:
        version = self.src.get("version")
        if version is not None:
            self.warnings.append(f"version: {version!r} replaced by 'v0.3' (converted from the flat layout)")
        self._providers()
        self._signals()
        self._decisions()
        self._moved()
        self._classifier()
        self._bert_model()
        for key in self.src:
            if key in LEGACY_KEYS or key == "version":
                continue
            self.warnings.append(f"{key}: not a known legacy key; dropped")
        if self.issues:
            raise ConfigError(self.issues, source="(legacy layout)")
        self.path_map.sort(key=lambda pair: -len(pair[0]))
        return Migration(self.out, self.warnings, self.path_map)

    # ---------------------------------------------------------------- providers
    def _endpoints(self) -> dict[str, dict[str, Any]]:
        endpoints: dict[str, dict[str, Any]] = {}
        for index, ep in enumerate(self._list("vllm_endpoints")):
            if not isinstance(ep, dict):
                self._issue(("vllm_endpoints", index), "an endpoint must be a mapping {name, address, port}")
                continue
            name = str(ep.get("name") or f"endpoint-{index}")
            if name in endpoints:
                self._issue(("vllm_endpoints", index, "name"), f"duplicate endpoint name {name!r}")
                continue
            ref = self._backend_ref(index, ep, name)
            if ref is None:
                continue
            dropped = sorted(set(ep) - ENDPOINT_KEYS)
            if dropped:
                self.warnings.append(
                    f"vllm_endpoints[{index}]: {', '.join(dropped)} dropped (no v0.3 equivalent in svc-sr)"
                )
            endpoints[name] = {"ref": ref, "models": ep.get("models")}
        return endpoints

    def _backend_ref(self, index: int, ep: dict[str, Any], name: str) -> dict[str, Any] | None:
        try:
            return backend_ref(ep, name)
        except EndpointError as exc:
            self._issue(("vllm_endpoints", index, exc.field), exc.message)
            return None

    def _providers(self) -> None:
        endpoints = self._endpoints()
        model_config = self._map("model_config")
        names: list[str] = [str(name) for name in model_config]
        for ep in endpoints.values():
            listed = ep["models"]
            if isinstance(listed, list):
                names.extend(str(m) for m in listed if str(m) not in names)
        unassigned = [name for name, ep in endpoints.items() if not isinstance(ep["models"], list)]

        models: list[dict[str, Any]] = []
        cards: list[dict[str, Any]] = []
        for name in names:
            params = model_config.get(name)
            if params is None:
                params = {}
            if not isinstance(params, dict):
                self._issue(("model_config", name), "model settings must be a mapping")
                continue
            entry = self._model_entry(name, params, endpoints, unassigned)
            card = {key: params[key] for key in MODEL_CARD_KEYS if key in params}
            if card:
                cards.append({"name": name, **card})
            if name in model_config:
                self.path_map.append(
                    (f"providers.models[{len(models)}]", format_path(("model_config", name)))
                )
            models.append(entry)

        defaults: dict[str, Any] = {}
        providers: dict[str, Any] = {"defaults": defaults, "models": models}
        self.out["providers"] = providers
        if models or endpoints:
            self.warnings.append(
                f"vllm_endpoints + model_config: converted to providers.models ({len(models)} model(s), "
                f"{len(endpoints)} endpoint(s))"
            )
        if cards:
            self.out.setdefault("routing", {})["modelCards"] = cards

    def _model_entry(
        self,
        name: str,
        params: dict[str, Any],
        endpoints: dict[str, dict[str, Any]],
        unassigned: list[str],
    ) -> dict[str, Any]:
        """providers.models[] entry of one model_config model (its card keys go elsewhere)."""
        entry: dict[str, Any] = {"name": name}
        for key in MODEL_PASSTHROUGH:
            if key in params:
                entry[key] = params[key]
        entry["backend_refs"] = self._refs_for(name, params, endpoints, unassigned)
        if params.get("access_key"):
            for ref in entry["backend_refs"]:
                ref["api_key"] = params["access_key"]
            self.warnings.append(
                f"model_config.{name}.access_key: copied to backend_refs[].api_key; prefer api_key_env "
                "so the secret stays out of the file"
            )
        if "pii_policy" in params:
            self.warnings.append(
                f"model_config.{name}.pii_policy: dropped; v0.3 enforces PII per decision "
                "(a `pii` plugin, or a `pii` signal routed to a fast_response decision)"
            )
        handled = {*MODEL_PASSTHROUGH, *MODEL_CARD_KEYS, "preferred_endpoints", "access_key", "pii_policy"}
        for key in sorted(set(params) - handled):
            self.warnings.append(f"model_config.{name}.{key}: not supported by svc-sr; dropped")
        return entry

    def _refs_for(
        self,
        name: str,
        params: dict[str, Any],
        endpoints: dict[str, dict[str, Any]],
        unassigned: list[str],
    ) -> list[dict[str, Any]]:
        preferred = params.get("preferred_endpoints")
        chosen: list[str] = []
        if preferred is not None:
            if not isinstance(preferred, list):
                self._issue(("model_config", name, "preferred_endpoints"), "must be a list of endpoint names")
                return []
            for index, ep_name in enumerate(preferred):
                if str(ep_name) in endpoints:
                    chosen.append(str(ep_name))
                else:
                    known = ", ".join(endpoints) or "none defined"
                    self._issue(
                        ("model_config", name, "preferred_endpoints", index),
                        f"unknown endpoint {ep_name!r} (vllm_endpoints: {known})",
                        code="unknown_endpoint",
                    )
        if not chosen:
            chosen = [
                ep_name
                for ep_name, ep in endpoints.items()
                if isinstance(ep["models"], list) and name in map(str, ep["models"])
            ]
        if not chosen and unassigned:
            chosen = list(unassigned)
            if len(unassigned) > 1:
                self.warnings.append(
                    f"model_config.{name}: no preferred_endpoints; served by every endpoint without a "
                    f"models list ({', '.join(unassigned)})"
                )
        return [copy.deepcopy(endpoints[ep_name]["ref"]) for ep_name in chosen]

    # ---------------------------------------------------------------- signals
    def _signals(self) -> None:
        signals: dict[str, Any] = {}
        for key, family in SIGNAL_FAMILIES.items():
            if key not in self.src:
                continue
            rules = self._list(key)
            converted = []
            for index, rule in enumerate(rules):
                if not isinstance(rule, dict):
                    self._issue((key, index), "a rule must be a mapping")
                    continue
                converted.append(self._rule(key, index, dict(rule)))
            signals[family] = converted
            self.path_map.append((f"routing.signals.{family}", key))
            self.warnings.append(f"{key}: converted to routing.signals.{family} ({len(converted)} rule(s))")
        if signals:
            self.out.setdefault("routing", {})["signals"] = signals

    def _rule(self, key: str, index: int, rule: dict[str, Any]) -> dict[str, Any]:
        where = f"{key}[{index}]"
        if key == "keyword_rules" and "name" not in rule and "category" in rule:
            rule["name"] = rule.pop("category")
            self.warnings.append(f"{where}.category: renamed to name")
        if key == "embedding_rules":
            if "candidates" not in rule and "keywords" in rule:
                rule["candidates"] = rule.pop("keywords")
                self.warnings.append(f"{where}.keywords: renamed to candidates")
            if rule.get("aggregation_method") == "avg":
                rule["aggregation_method"] = "mean"
        if key == "categories":
            keep = {"name", "description", "mmlu_categories", "model_scores", "threshold"}
            extra = sorted(set(rule) - keep)
            synthesizing = not self.src.get("decisions") and bool(rule.get("model_scores"))
            dropped = [k for k in extra if not (synthesizing and k in USED_BY_SYNTHESIS)]
            if dropped:
                self.warnings.append(
                    f"{where}: {', '.join(dropped)} dropped (no per-domain equivalent in v0.3)"
                )
            rule = {k: v for k, v in rule.items() if k in keep}
        return rule

    # ---------------------------------------------------------------- decisions
    def _decisions(self) -> None:
        if "decisions" in self.src:
            return  # moved whole by _moved()
        categories = [c for c in self._list("categories") if isinstance(c, dict)]
        scored = [c for c in categories if isinstance(c.get("model_scores"), list) and c["model_scores"]]
        if not scored:
            return
        decisions = []
        for category in scored:
            decision = self._decision_from_category(category)
            if decision is not None:
                decisions.append(decision)
        self.out.setdefault("routing", {})["decisions"] = decisions
        self.warnings.append(
            f"categories[].model_scores: synthesized {len(decisions)} decision(s), one per category, each "
            "routing to its highest-scoring model (pre-decision layout)"
        )

    def _decision_from_category(self, category: dict[str, Any]) -> dict[str, Any] | None:
        decision = decision_from_category(category)
        if decision is None:
            name = str(category.get("name", ""))
            self.warnings.append(f"category {name!r}: no usable model_scores; no decision synthesized")
        return decision

    # ---------------------------------------------------------------- moved sections
    def _moved(self) -> None:
        for key, target in MOVED.items():
            if key not in self.src:
                continue
            if key == "response_cache" and "semantic_cache" in self.src:
                self.warnings.append(
                    "response_cache: ignored, semantic_cache already set global.stores.response_cache"
                )
                continue
            value = self.src[key]
            if key == "decisions" and not isinstance(value, list):
                self._issue(("decisions",), f"must be a list, got {type(value).__name__}")
                continue
            existing = self.out.get("routing", {}).get("modelCards") if key == "model_cards" else None
            if isinstance(existing, list) and isinstance(value, list):
                value = [*existing, *value]  # cards derived from model_config come first
            _set(self.out, target, copy.deepcopy(value))
            self.path_map.append((target, key))
            if key not in KEPT_IN_PLACE:
                self.warnings.append(f"{key}: moved to {target}")
        for key, reason in DROPPED_WITH_REASON.items():
            if key in self.src:
                self.warnings.append(f"{key}: dropped; {reason}")

    def _classifier(self) -> None:
        classifier = self._map("classifier")
        modules: dict[str, Any] = {}
        for key, value in classifier.items():
            target = CLASSIFIER_MODULES.get(key)
            if target is None:
                self.warnings.append(f"classifier.{key}: not a known classifier model; dropped")
                continue
            modules[target] = copy.deepcopy(value)
            dotted = f"global.model_catalog.modules.classifier.{target}"
            self.path_map.append((dotted, f"classifier.{key}"))
            self.warnings.append(f"classifier.{key}: moved to {dotted}")
        if modules:
            _set(self.out, "global.model_catalog.modules.classifier", modules)

    def _bert_model(self) -> None:
        bert = self.src.get("bert_model")
        if bert is None:
            return
        if not isinstance(bert, dict):
            self._issue(("bert_model",), "must be a mapping {model_id, threshold, use_cpu}")
            return
        catalog = self.out.setdefault("global", {}).setdefault("model_catalog", {})
        embeddings = catalog.setdefault("embeddings", {})
        semantic = embeddings.setdefault("semantic", {}) if isinstance(embeddings, dict) else None
        if not isinstance(semantic, dict):
            self._issue(("embedding_models",), "must be a mapping")
            return
        if "model_id" in bert:
            semantic.setdefault("bert_model_path", bert["model_id"])
        if "use_cpu" in bert:
            semantic.setdefault("use_cpu", bert["use_cpu"])
        self.warnings.append(
            "bert_model: model_id moved to global.model_catalog.embeddings.semantic.bert_model_path"
            + ("; threshold dropped (thresholds live on each signal/cache)" if "threshold" in bert else "")
        )
