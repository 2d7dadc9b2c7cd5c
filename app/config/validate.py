"""Cross-reference checks the schema alone cannot express.

pydantic checks each value's shape; this module checks that the pieces fit together:
every modelRef names a configured model, every condition names a defined signal of a
type svc-sr evaluates, plugin configurations are valid for svc-sr's plugins, names are
unique, ports do not collide. The reference router accepted several of these mistakes
silently (users' issues #2114, #2324); here each one is a rejection naming its path.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ValidationError

from app.config.binding_checks import binding_issues, custom_domain_model
from app.config.document import RouterConfig
from app.config.errors import ConfigIssue, did_you_mean, issues_from_validation_error
from app.config.plugins import PLUGIN_KIND, PLUGIN_MODELS, plugin_payload
from app.config.providers import ProviderModel
from app.config.routing import PLUGIN_TYPES, REFERENCE_ONLY_PLUGIN_TYPES, Condition, Decision
from app.config.semantic_signals import condition_names
from app.config.signals import (
    REFERENCE_ONLY_SIGNAL_TYPES,
    SIGNAL_FAMILIES,
    DomainSignal,
    prompt_guard_harmful_issues,
)

# The labels of the domain classifier (MMLU-Pro's 14 categories).
MMLU_PRO_CATEGORIES: tuple[str, ...] = (
    "biology",
    "business",
    "chemistry",
    "computer science",
    "economics",
    "engineering",
    "health",
    "history",
    "law",
    "math",
    "other",
    "philosophy",
    "physics",
    "psychology",
)

# routing.signals families of the reference router that svc-sr keeps as data only.
REFERENCE_SIGNAL_FAMILY_KEYS = frozenset(
    {
        "reasks",
        "structure",
        "role_bindings",
        "conversation",
        "events",
        "metadata",
        "classifiers",
    }
)

SIGNALS = "routing.signals"


def semantic_issues(config: RouterConfig) -> tuple[list[ConfigIssue], list[str]]:
    """(errors, warnings) of a schema-valid config; any error makes the config unusable."""
    checker = _Checker(config)
    checker.run()
    return checker.errors, checker.warnings


def domain_names(config: RouterConfig) -> set[str]:
    """Names a `domain` condition may use: the 14 categories plus declared domains and aliases."""
    names = set(MMLU_PRO_CATEGORIES)
    for domain in config.routing.signals.domains:
        names.add(domain.name)
        names.update(domain.mmlu_categories)
    return names


def _duplicates(names: Iterable[str]) -> set[str]:
    return {name for name, count in Counter(names).items() if count > 1}


class _Checker:
    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.errors: list[ConfigIssue] = []
        self.warnings: list[str] = []
        self.model_names = [model.name for model in config.providers.models]

    def error(self, path: str, message: str, code: str) -> None:
        self.errors.append(ConfigIssue(path=path, message=message, code=code, stage="validate"))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}" if path else message)

    def run(self) -> None:
        self._listeners()
        self._providers()
        self._signals()
        self._decisions()
        self._model_deployments()

    def _model_deployments(self) -> None:
        errors, warnings = binding_issues(self.config)
        self.errors += errors
        self.warnings += warnings

    # ---------------------------------------------------------------- listeners / services
    def _listeners(self) -> None:
        services = self.config.global_.services
        reserved = {
            services.management_api.port: "global.services.management_api.port",
            services.observability.metrics.port: "global.services.observability.metrics.port",
        }
        if services.management_api.port == services.observability.metrics.port:
            self.error(
                "global.services.observability.metrics.port",
                f"port {services.management_api.port} is also global.services.management_api.port",
                "port_conflict",
            )
        seen_ports: dict[int, int] = {}
        seen_names: set[str] = set()
        for index, listener in enumerate(self.config.listeners):
            path = f"listeners[{index}]"
            if listener.name in seen_names:
                self.error(f"{path}.name", f"duplicate listener name {listener.name!r}", "duplicate_name")
            seen_names.add(listener.name)
            if listener.port in seen_ports:
                self.error(
                    f"{path}.port",
                    f"port {listener.port} is already used by listeners[{seen_ports[listener.port]}]",
                    "duplicate_port",
                )
            else:
                seen_ports[listener.port] = index
            if listener.port in reserved:
                self.error(
                    f"{path}.port", f"port {listener.port} is also {reserved[listener.port]}", "port_conflict"
                )

    # ---------------------------------------------------------------- providers
    def _providers(self) -> None:
        providers = self.config.providers
        if not providers.models:
            self.error("providers.models", "no models configured: there is nothing to route to", "no_models")
        for name in sorted(_duplicates(self.model_names)):
            index = len(self.model_names) - 1 - self.model_names[::-1].index(name)
            self.error(f"providers.models[{index}].name", f"duplicate model name {name!r}", "duplicate_name")
        for index, model in enumerate(providers.models):
            self._provider_model(f"providers.models[{index}]", model)
        self._default_model()

    def _provider_model(self, path: str, model: ProviderModel) -> None:
        families = self.config.providers.defaults.reasoning_families
        if model.name in self.config.auto_model_names:
            self.error(
                f"{path}.name",
                f"{model.name!r} is an auto-routing model name (global.router.auto_model_name(s)); "
                "requests for it would be routed, never sent to this model",
                "reserved_name",
            )
        if not model.backend_refs and model.llm_config is None:
            self.error(
                f"{path}.backend_refs",
                f"model {model.name!r} has no backend_refs: nothing to send its requests to "
                "(add one with `endpoint: host:port` or `base_url`, or serve it in the cluster "
                "with `llm_config`)",
                "no_backends",
            )
        for name in sorted(_duplicates(ref.name for ref in model.backend_refs if ref.name)):
            self.error(f"{path}.backend_refs", f"duplicate backend_ref name {name!r}", "duplicate_name")
        if model.reasoning_family is not None and model.reasoning_family not in families:
            known = ", ".join(sorted(families)) or "none defined"
            self.error(
                f"{path}.reasoning_family",
                f"unknown reasoning family {model.reasoning_family!r} "
                f"(providers.defaults.reasoning_families: {known})"
                + did_you_mean(model.reasoning_family, families),
                "unknown_reasoning_family",
            )
        if model.pricing is not None:
            for key, value in model.pricing.model_dump().items():
                if isinstance(value, int | float) and (value < 0 or not math.isfinite(value)):
                    self.error(
                        f"{path}.pricing.{key}",
                        f"price must be a finite number >= 0, got {value}",
                        "invalid_pricing",
                    )
        for key, alias in model.external_model_ids.items():
            if alias in self.model_names and alias != model.name:
                self.error(
                    f"{path}.external_model_ids.{key}",
                    f"{alias!r} is the name of another configured model (ambiguous lookup)",
                    "ambiguous_name",
                )

    def _default_model(self) -> None:
        providers = self.config.providers
        default = providers.defaults.default_model
        all_names = set(self.model_names)
        if default is None:
            if providers.models:
                self.warn(
                    "providers.defaults.default_model",
                    "not set: requests that match no decision have no model to go to",
                )
        elif default not in all_names:
            self.error(
                "providers.defaults.default_model",
                f"{default!r} is not a configured model" + did_you_mean(default, all_names),
                "unknown_model",
            )

    # ---------------------------------------------------------------- signals
    def _signals(self) -> None:
        self._signal_families()
        self._context_signals()
        self._keyword_signals()
        self._embedding_signals()
        for index, domain in enumerate(self.config.routing.signals.domains):
            self._domain_signal(f"{SIGNALS}.domains[{index}]", domain)
        for path, message, code in prompt_guard_harmful_issues(self.config.global_.model_catalog):
            self.error(path, message, code)

    def _signal_families(self) -> None:
        signals = self.config.routing.signals
        for family in SIGNAL_FAMILIES.values():
            names = [rule.name for rule in getattr(signals, family)]
            self._duplicate_names(f"{SIGNALS}.{family}", names)
        for key, value in (signals.model_extra or {}).items():
            if key not in REFERENCE_SIGNAL_FAMILY_KEYS:
                known = [*SIGNAL_FAMILIES.values(), *REFERENCE_SIGNAL_FAMILY_KEYS]
                self.error(
                    f"{SIGNALS}.{key}", "unknown signal family" + did_you_mean(key, known), "unknown_family"
                )
                continue
            if value:
                self.warn(
                    f"{SIGNALS}.{key}",
                    "signal family of the reference router that svc-sr does not "
                    "evaluate; kept as data, no decision may reference it",
                )
            if isinstance(value, list):
                rule_names = [
                    str(item.get("name")) for item in value if isinstance(item, dict) and "name" in item
                ]
                self._duplicate_names(f"{SIGNALS}.{key}", rule_names)

    def _context_signals(self) -> None:
        for index, rule in enumerate(self.config.routing.signals.context):
            path = f"{SIGNALS}.context[{index}]"
            if rule.min_tokens is None and rule.max_tokens is None:
                self.error(path, "a context signal needs min_tokens and/or max_tokens", "empty_range")
            elif (
                rule.min_tokens is not None
                and rule.max_tokens is not None
                and rule.min_tokens > rule.max_tokens
            ):
                self.error(
                    f"{path}.min_tokens",
                    f"min_tokens ({rule.min_tokens}) is greater than max_tokens ({rule.max_tokens})",
                    "invalid_range",
                )

    def _keyword_signals(self) -> None:
        for index, rule in enumerate(self.config.routing.signals.keywords):
            for k, keyword in enumerate(rule.keywords):
                path = f"{SIGNALS}.keywords[{index}].keywords[{k}]"
                if not keyword.strip():
                    self.error(path, "empty keyword", "empty_keyword")
                elif rule.method == "regex":
                    try:
                        re.compile(keyword)
                    except re.error as exc:
                        self.error(path, f"invalid regular expression: {exc}", "invalid_regex")

    def _embedding_signals(self) -> None:
        for index, rule in enumerate(self.config.routing.signals.embeddings):
            for k, candidate in enumerate(rule.candidates):
                if not candidate.strip():
                    self.error(
                        f"{SIGNALS}.embeddings[{index}].candidates[{k}]", "empty candidate", "empty_candidate"
                    )

    def _domain_signal(self, path: str, domain: DomainSignal) -> None:
        known_models = set(self.model_names)
        labels = [domain.name, *domain.mmlu_categories]
        if custom_domain_model(self.config):
            pass  # its own labels, checked against the rules with the model (app/config/binding_checks.py)
        elif not any(label in MMLU_PRO_CATEGORIES for label in labels):
            self.warn(
                path,
                f"domain {domain.name!r} never matches: the domain classifier emits only "
                f"the 14 MMLU-Pro categories; list some in mmlu_categories",
            )
        for k, category in enumerate(domain.mmlu_categories):
            if category not in MMLU_PRO_CATEGORIES and not custom_domain_model(self.config):
                self.warn(
                    f"{path}.mmlu_categories[{k}]",
                    f"{category!r} is not an MMLU-Pro category" + did_you_mean(category, MMLU_PRO_CATEGORIES),
                )
        for k, score in enumerate(domain.model_scores):
            model = score.get("model")
            if not isinstance(model, str):
                self.error(
                    f"{path}.model_scores[{k}].model",
                    "a model score needs `model` (a model name)",
                    "missing" if model is None else "string_type",
                )
            elif model not in known_models:
                self.error(
                    f"{path}.model_scores[{k}].model",
                    f"{model!r} is not a configured model" + did_you_mean(str(model), known_models),
                    "unknown_model",
                )
            if "score" in score and (
                isinstance(score["score"], bool) or not isinstance(score["score"], int | float)
            ):
                self.error(f"{path}.model_scores[{k}].score", "score must be a number", "float_type")

    def _duplicate_names(self, path: str, names: list[str]) -> None:
        for name in sorted(_duplicates(names)):
            index = len(names) - 1 - names[::-1].index(name)
            self.error(f"{path}[{index}].name", f"duplicate signal name {name!r}", "duplicate_name")

    # ---------------------------------------------------------------- decisions
    def _decisions(self) -> None:
        decisions = self.config.routing.decisions
        names = [decision.name for decision in decisions]
        for name in sorted(_duplicates(names)):
            index = len(names) - 1 - names[::-1].index(name)
            self.error(
                f"routing.decisions[{index}].name", f"duplicate decision name {name!r}", "duplicate_name"
            )
        for index, decision in enumerate(decisions):
            self._decision(f"routing.decisions[{index}]", decision)
            self._elo_learning(f"routing.decisions[{index}]", decision)

    def _elo_learning(self, path: str, decision: Decision) -> None:
        """An outcome reaches elo ratings through its replay record (app/pipeline/learning/elo_feedback.py)."""
        if decision.algorithm.type == "elo" and not any(p.type == "router_replay" for p in decision.plugins):
            self.warn(
                f"{path}.algorithm",
                f"decision {decision.name!r} selects by elo ratings but records no replays (router_replay "
                "plugin): outcomes cannot name its requests, so its ratings never change",
            )

    def _decision(self, path: str, decision: Decision) -> None:
        known = set(self.model_names)
        if not decision.modelRefs:
            self.warn(
                f"{path}.modelRefs", f"decision {decision.name!r} has no modelRefs; it uses default_model"
            )
            if self.config.default_model is None:
                self.error(
                    f"{path}.modelRefs", "no modelRefs and no providers.defaults.default_model", "no_model"
                )
        for k, ref in enumerate(decision.modelRefs):
            model = self.config.model(ref.model) if ref.model in known else None
            if model is None:
                self.error(
                    f"{path}.modelRefs[{k}].model",
                    f"unknown model {ref.model!r}" + did_you_mean(ref.model, known),
                    "unknown_model",
                )
            elif ref.use_reasoning and model.reasoning_family is None:
                self.warn(
                    f"{path}.modelRefs[{k}].use_reasoning",
                    f"model {ref.model!r} has no reasoning_family; use_reasoning has no effect",
                )
        if decision.preferred_endpoints:
            refs = {m.name: m for m in self.config.providers.models}
            targets = [refs[r.model] for r in decision.modelRefs if r.model in refs] or list(refs.values())
            endpoint_names = {ref.name for model in targets for ref in model.backend_refs if ref.name}
            for k, endpoint in enumerate(decision.preferred_endpoints):
                if endpoint not in endpoint_names:
                    self.error(
                        f"{path}.preferred_endpoints[{k}]",
                        f"no backend_ref named {endpoint!r} serves this decision's models"
                        + did_you_mean(endpoint, endpoint_names),
                        "unknown_endpoint",
                    )
        if decision.rules is not None:
            self._condition(f"{path}.rules", decision.rules)
        self._plugins(path, decision)

    def _condition(self, path: str, condition: Condition) -> None:
        if not condition.is_leaf:
            for index, child in enumerate(condition.conditions):
                self._condition(f"{path}.conditions[{index}]", child)
            return
        kind, name = condition.type or "", condition.name or ""
        if kind not in SIGNAL_FAMILIES:
            if kind in REFERENCE_ONLY_SIGNAL_TYPES:
                self.error(
                    f"{path}.type", f"signal type {kind!r} is not supported by svc-sr", "unsupported_signal"
                )
            else:
                self.error(
                    f"{path}.type",
                    f"unknown condition type {kind!r} (svc-sr evaluates: {', '.join(SIGNAL_FAMILIES)})"
                    + did_you_mean(kind, SIGNAL_FAMILIES),
                    "unknown_signal_type",
                )
            return
        family = SIGNAL_FAMILIES[kind]
        defined = {rule.name for rule in getattr(self.config.routing.signals, family)}
        rules = getattr(self.config.routing.signals, family)
        allowed = domain_names(self.config) if kind == "domain" else condition_names(kind, rules)
        if name not in allowed:
            listing = ", ".join(sorted(defined)) or "none defined"
            self.error(
                f"{path}.name",
                f"no {kind} signal named {name!r} (routing.signals.{family}: {listing})"
                + did_you_mean(name, allowed),
                "unknown_signal",
            )

    def _plugins(self, path: str, decision: Decision) -> None:
        kinds: dict[str, int] = {}
        for index, plugin in enumerate(decision.plugins):
            where = f"{path}.plugins[{index}]"
            kind = PLUGIN_KIND.get(plugin.type, plugin.type)
            if kind in kinds:
                self.error(
                    f"{where}.type",
                    f"plugin {plugin.type!r} repeats plugins[{kinds[kind]}] of the same kind",
                    "duplicate_plugin",
                )
            kinds.setdefault(kind, index)
            if plugin.type in PLUGIN_TYPES:
                parsed = parse_plugin_issues(
                    plugin_payload(plugin), plugin.type, f"{where}.configuration", self.errors
                )
                if getattr(parsed, "action", None) == "route" and not self._private_models():
                    self.error(
                        f"{where}.configuration.action",
                        "action 'route' needs a model marked private: true in providers.models",
                        "no_private_model",
                    )
            elif plugin.type in REFERENCE_ONLY_PLUGIN_TYPES:
                self.warn(f"{where}.type", f"plugin {plugin.type!r} accepted but not applied by svc-sr")
            else:
                self.error(
                    f"{where}.type",
                    f"unknown plugin type {plugin.type!r}" + did_you_mean(plugin.type, PLUGIN_TYPES),
                    "unknown_plugin",
                )

    def _private_models(self) -> list[str]:
        return [m.name for m in self.config.providers.models if m.private]


def parse_plugin_issues(
    payload: dict, plugin_type: str, path: str, out: list[ConfigIssue]
) -> BaseModel | None:
    model = PLUGIN_MODELS[plugin_type]
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        out.extend(issues_from_validation_error(exc, document=payload, prefix=path, root=model))
        return None
