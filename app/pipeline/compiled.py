"""`CompiledConfig`: everything route() needs that depends only on the config, built once
per config version.

The pipeline holds one version at a time and a request reads the version it started with
throughout, so a hot reload (build and warm the new version aside, then swap) never mixes
two configs inside one request.
"""

from __future__ import annotations

import asyncio
import logging

from app.config.document import RouterConfig
from app.config.recipes import DEFAULT_RECIPE, as_default, entrypoint_models
from app.config.reliability import FallbackConfig
from app.config.routing import Decision
from app.config.signals import SIGNAL_FAMILIES
from app.pipeline import decisions as engine
from app.pipeline.elo_selector import compile_elo_selectors
from app.pipeline.plugins import DecisionPlugins, GuardRule, compile_guards, compile_plugins
from app.pipeline.rag import warm_retrieval
from app.pipeline.selection import ModelIndex
from app.pipeline.selectors import Selector, compile_selectors
from app.pipeline.services import PipelineServices
from app.pipeline.signals import BUILTIN_EVALUATORS
from app.pipeline.signals.base import EvaluatorFactory, SignalEvaluator
from app.pipeline.signals.embedding import EmbeddingEvaluator
from app.pipeline.signals.harmful import prompt_guard_harmful_rule
from app.pipeline.signals.jailbreak import prompt_guard_rule
from app.pipeline.signals.runtime import bound_embedder, bound_evaluators
from app.pipeline.tools import ToolVectorCache

log = logging.getLogger("svc_sr.pipeline")

EXTRA_AUTO_NAMES = frozenset({"vllm-sr/auto"})


class DirectRoutes:
    """What an unrouted request needs of a config version (an explicit model, or an auto one with
    `global.router.enabled: false`): the model index, the auto names, the default model and the
    global fallback. Cheap (no evaluators, selectors or models), so a front door holds one too
    and routes an explicit model without a Router hop (app/pipeline/direct_route.py)."""

    def __init__(self, config: RouterConfig, root: bool = True) -> None:
        self.entrypoints: dict[str, str] = entrypoint_models(config) if root else {}
        self.models = ModelIndex(config)
        # entrypoint model names are auto too: routed by their recipe (CompiledConfig.for_model)
        self.auto_names = frozenset(config.auto_model_names) | EXTRA_AUTO_NAMES | frozenset(self.entrypoints)
        self.defaults = config.providers.defaults
        self.global_fallback = _global_fallback(config)


class CompiledConfig:
    """One config version, compiled: decisions, model index, plugins, guards, evaluators.

    The root instance compiles the top-level routing (recipe `default`) and holds one child
    CompiledConfig per named recipe, built with the config whose routing is the recipe's:
    an entrypoint request runs the same phases over its recipe's child."""

    def __init__(
        self, config: RouterConfig, services: PipelineServices, recipe: str = DEFAULT_RECIPE
    ) -> None:
        self.config = config
        self.recipe = recipe
        root = recipe == DEFAULT_RECIPE
        self.direct = direct = DirectRoutes(config, root)
        self.entrypoints, self.auto_names, self.models = direct.entrypoints, direct.auto_names, direct.models
        self.defaults, self.global_fallback = direct.defaults, direct.global_fallback
        self.recipes: dict[str, CompiledConfig] = (
            {r.name: CompiledConfig(as_default(config, r.routing), services, r.name) for r in config.recipes}
            if root
            else {}
        )
        routing = config.routing
        self.decisions: list[Decision] = list(routing.decisions)
        self.strategy = routing.strategy
        self.decision_table = engine.DecisionTable(self.decisions, self.strategy)  # rules compiled once
        self.tiered = self.decision_table.tiered
        self.referenced = engine.referenced_signals(self.decisions)
        self.rule_reads = rule_reads(config)
        # `global.router.enabled: false`: auto requests go to the default model unrouted.
        self.routing_enabled = config.global_.router.enabled
        self.global_cache = config.global_.stores.response_cache
        self.plugins: dict[str, DecisionPlugins] = {
            d.name: compile_plugins(d, self.global_cache) for d in self.decisions
        }
        # Every family is built (cheap: no model work before warm_up), so previews can show
        # unreferenced rules; route() asks each only for the names decisions reference.
        factories: dict[str, EvaluatorFactory] = {**BUILTIN_EVALUATORS, **services.evaluators}
        self.evaluators: dict[str, SignalEvaluator] = {
            family: factory(config, services) for family, factory in factories.items()
        }
        self.evaluators.update(bound_evaluators(config, services.bound_workers, self.evaluators))
        # the `embedding` binding's encoder: the embedding rules' and the cache's space (None: MiniLM's)
        self.semantic = bound_embedder(config, services.bound_workers)
        if self.semantic is not None:
            self.evaluators["embedding"] = EmbeddingEvaluator.bound(
                config, self.semantic, services.bound_phrase_caches
            )
        self.prompt_guard = prompt_guard_rule(config)
        self.prompt_guard_harmful = prompt_guard_harmful_rule(config)
        self.guards: dict[str, list[GuardRule]] = {d.name: compile_guards(d) for d in self.decisions}
        # Learned selectors load their artifacts here: a config naming one that is missing
        # fails its activation, not its first request.
        self.selectors: dict[str, Selector] = {
            **compile_selectors(self.decisions, config, self.models),
            **compile_elo_selectors(self.decisions, self.models, services.ratings),
        }
        uses_elo = any(s.kind == "elo" for s in self.selectors.values())
        self._ratings = services.ratings if uses_elo else None
        self._retrieve = services.retrieve
        # `tool_selection`: the router's encoder, tool vectors kept per config version (bounded)
        self.embed = services.embed
        self.tool_vectors = ToolVectorCache()
        self.prefetch_vector = bool(self.global_cache.enabled and services.cache_lookup is not None)

    def for_model(self, model: str) -> CompiledConfig:
        """The compiled recipe routing a request for `model` (self: the default recipe)."""
        return self.for_recipe(self.entrypoints.get(model, self.recipe))

    def for_recipe(self, name: str | None) -> CompiledConfig:
        return self.recipes.get(name or self.recipe, self)

    def global_guards(self) -> list[GuardRule]:
        """The guards every auto request passes: `prompt_guard` and its `harmful` part (when enabled)."""
        guards: list[GuardRule] = []
        if self.prompt_guard is not None:
            guards.append(("jailbreak", self.prompt_guard))
        if self.prompt_guard_harmful is not None:
            guards.append(("harmful", self.prompt_guard_harmful))
        return guards

    def all_signal_names(self) -> dict[str, frozenset[str]]:
        """Every configured rule name by family (previews evaluate them all)."""
        out = {family: frozenset(ev.rule_names()) for family, ev in self.evaluators.items()}
        for family, names in self.referenced.items():
            out[family] = out.get(family, frozenset()) | names
        return {family: names for family, names in out.items() if names}

    @property
    def encoder(self) -> str | None:
        """The identity of the bound encoder the cache partitions are keyed by (None: the graph's)."""
        return self.semantic.identity if self.semantic is not None else None

    async def warm_up(self) -> None:
        """Embed candidate phrases, load models etc. now, not on the first request."""
        if self.semantic is not None:  # its identity keys the cache from the first request
            await self.semantic.warm_up()
        await asyncio.gather(
            *(ev.warm_up() for ev in self.evaluators.values()), *(r.warm_up() for r in self.recipes.values())
        )
        if self._ratings is not None:  # serve the stored ratings from the first request on
            await self._ratings.refresh()
        rag = [p.rag for p in self.plugins.values() if p.rag is not None]
        if rag and self._retrieve is not None:
            await warm_retrieval(self._retrieve, rag)


# Families that read no text of the request (`context` counts the whole prompt's tokens).
TEXTLESS_FAMILIES = frozenset({"context"})


def rule_reads(config: RouterConfig) -> dict[tuple[str, str], tuple[str, ...]]:
    """(family, rule) -> the parts the rule reads (its `read`, `conversation` for the older
    `include_history`), for every text-reading rule; a rule absent reads the human's ask."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for family, attr in SIGNAL_FAMILIES.items():
        if family in TEXTLESS_FAMILIES:
            continue
        for rule in getattr(config.routing.signals, attr, None) or []:
            read = set(getattr(rule, "read", None) or ())
            if getattr(rule, "include_history", False):
                read.add("conversation")
            if read - {"ask"}:
                out[(family, rule.name)] = tuple(sorted(read))
    return out


def _global_fallback(config: RouterConfig) -> FallbackConfig | None:
    raw = getattr(config.global_.router, "fallback", None)
    if raw is None:
        return None
    if isinstance(raw, FallbackConfig):
        return raw
    try:
        return FallbackConfig.model_validate(raw)
    except ValueError:
        log.warning("ignoring invalid global.router.fallback")
        return None
