"""Bindings of a plugin type in the ACTIVE configuration (GET /api/v1/plugins/{type}/bindings):
the decisions, per recipe, whose `plugins[]` list it, with declared enablement and what the
plugin depends on.

Configuration only (runtime_inspected false): a dependency is `configured` when the
configuration sets it up; whether it answers is not probed here (`available` null), except
where svc-sr knows it cannot (a vector store: no retrieval in svc-sr, available false).
"""

from __future__ import annotations

from typing import Any

from app.api.plugins.plugin_schemas import PluginBindingList, PluginBindingView, PluginDependency
from app.api.plugins.plugins_registry import kind_of
from app.common.mgmt_errors import MgmtError
from app.config.document import RouterConfig
from app.config.plugins import PLUGIN_MODELS
from app.config.recipes import DEFAULT_RECIPE, recipe_names, recipe_routing
from app.config.routing import Decision, Plugin


def recipe_not_found(name: str, config: RouterConfig) -> MgmtError:
    known = ", ".join(recipe_names(config))
    return MgmtError(404, f"no recipe named {name!r} (recipes: {known})", code="RECIPE_NOT_FOUND")


def decision_not_found(name: str, recipe: str | None) -> MgmtError:
    where = f"recipe {recipe!r}" if recipe else "any recipe"
    return MgmtError(404, f"no decision named {name!r} in {where}", code="NOT_FOUND")


def find_decision(config: RouterConfig, recipe: str, decision: str) -> Decision:
    """The decision `decision` of recipe `recipe` (404 for either unknown)."""
    routing = recipe_routing(config, recipe)
    if routing is None:
        raise recipe_not_found(recipe, config)
    found = next((d for d in routing.decisions if d.name == decision), None)
    if found is None:
        raise decision_not_found(decision, recipe)
    return found


def find_plugin(decision: Decision, plugin_type: str) -> tuple[int, Plugin] | None:
    """The decision's plugin of `plugin_type`'s kind (an alias matches its type)."""
    kind = kind_of(plugin_type)
    return next(
        ((i, p) for i, p in enumerate(decision.plugins) if kind_of(p.type) == kind),
        None,
    )


def declared_enabled(plugin: Plugin) -> bool:
    if plugin.enabled is not None:
        return plugin.enabled
    return plugin.configuration.get("enabled") is not False


def bindings(
    config: RouterConfig, plugin_type: str, recipe: str | None = None, decision: str | None = None
) -> PluginBindingList:
    if recipe is not None and recipe_routing(config, recipe) is None:
        raise recipe_not_found(recipe, config)
    scope = [recipe] if recipe is not None else recipe_names(config)
    views: list[PluginBindingView] = []
    seen_decision = False
    for name in scope:
        routing = recipe_routing(config, name)
        assert routing is not None
        for item in routing.decisions:
            if decision is not None and item.name != decision:
                continue
            seen_decision = True
            found = find_plugin(item, plugin_type)
            if found is not None:
                views.append(_view(config, name, item.name, *found))
    if decision is not None and not seen_decision:
        raise decision_not_found(decision, recipe)
    return PluginBindingList(type=plugin_type, recipe=recipe, decision=decision, bindings=views)


def _view(config: RouterConfig, recipe: str, decision: str, index: int, plugin: Plugin) -> PluginBindingView:
    enabled = declared_enabled(plugin)
    applied = plugin.type in PLUGIN_MODELS
    deps = dependencies(config, plugin.type, plugin.configuration)
    if not enabled:
        reachability = "disabled"
    elif not applied:
        reachability = "not_applied"
    elif not all(d.configured for d in deps):
        reachability = "dependency_unconfigured"
    else:
        reachability = "configured"
    availability = [d.available for d in deps]
    available: bool | None = None
    if any(a is False for a in availability) or not all(d.configured for d in deps):
        available = False
    elif all(a is True for a in availability):
        available = True
    return PluginBindingView(
        recipe=recipe,
        decision=decision,
        plugin_index=index,
        type=plugin.type,
        declared_enabled=enabled,
        applied=applied,
        reachability=reachability,
        dependencies=deps,
        dependencies_available=available,
    )


def dependencies(
    config: RouterConfig, plugin_type: str, configuration: dict[str, Any] | None = None
) -> list[PluginDependency]:
    """What the plugin needs besides the request, as the configuration sets it up (a rag
    binding's `configuration` says which of vector stores and knowledge bases it reads)."""
    document = config.to_document()
    kind = kind_of(plugin_type)
    if kind in ("tool_selection", "response_cache"):
        encoder = PluginDependency(name="embedding", kind="model", configured=True)  # built in
        if kind == "tool_selection":
            return [encoder]
        cache = config.global_.stores.response_cache
        store = PluginDependency(
            name=f"response_cache ({cache.backend_type})",
            kind="store",
            config_path="global.stores.response_cache",
            configured=bool(cache.enabled),
        )
        return [encoder, store]
    if kind in ("pii", "jailbreak"):
        return [PluginDependency(name=f"{kind} classifier", kind="model", configured=True)]
    if kind == "rag":
        return _rag_dependencies(document, configuration or {})
    if kind == "memory":
        path = "global.stores.memory"
        return [
            PluginDependency(name="memory", kind="store", config_path=path, configured=_has(document, path))
        ]
    if kind == "hallucination":
        path = "global.model_catalog.modules.hallucination_mitigation"
        return [
            PluginDependency(
                name="hallucination detector", kind="model", config_path=path, configured=_has(document, path)
            )
        ]
    return []


def _rag_dependencies(document: dict[str, Any], configuration: dict[str, Any]) -> list[PluginDependency]:
    """The vector-store service when the binding names a store (or no source: as before), and
    each knowledge base it names (kept outside the configuration: configured by being named)."""
    kbs = ([configuration.get("knowledge_base")] if configuration.get("knowledge_base") else []) + list(
        configuration.get("knowledge_bases") or []
    )
    deps: list[PluginDependency] = []
    if configuration.get("vector_store_id") or configuration.get("vector_store_ids") or not kbs:
        path = "global.stores.vector_store"
        deps.append(
            PluginDependency(
                name="vector_store", kind="store", config_path=path, configured=_has(document, path)
            )
        )
    names = dict.fromkeys(str(name) for name in kbs)
    return deps + [PluginDependency(name=f"knowledge_base {n}", kind="store", configured=True) for n in names]


def _has(document: dict[str, Any], path: str) -> bool:
    node: Any = document
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return node not in (None, {}, []) and not (isinstance(node, dict) and node.get("enabled") is False)


__all__ = ["DEFAULT_RECIPE", "bindings", "find_decision", "find_plugin", "declared_enabled"]
