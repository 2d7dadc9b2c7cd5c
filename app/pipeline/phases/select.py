"""Phase `select`: the model that answers (`selection.py`) and what follows from it: the
candidate targets in order, reliability and fallback policies, and pricing by model."""

from __future__ import annotations

import logging
import random

from app.config.pricing import Pricing
from app.config.providers import ProviderModel
from app.config.routing import Decision, ModelRef
from app.keys.grant import ModelGrant
from app.pipeline.compiled import CompiledConfig, DirectRoutes
from app.pipeline.grants import check_explicit, within_grant
from app.pipeline.headers import fill_routing_headers
from app.pipeline.plan import RoutePlan
from app.pipeline.selection import (
    ModelNotFoundError,
    NoRouteError,
    Selection,
    candidates_for,
    select_for_decision,
)
from app.pipeline.signals.base import SignalContext

log = logging.getLogger("svc_sr.pipeline")


async def select_model(
    state: CompiledConfig,
    plan: RoutePlan,
    decision: Decision | None,
    rng: random.Random,
    ctx: SignalContext,
    grant: ModelGrant | None = None,
) -> Selection:
    """The decision's model (or the default model when no decision matched) into the plan,
    within the request's key's grants (app/pipeline/grants.py)."""
    ordered = await learned_order(state, decision, ctx)
    selection = select_for_decision(decision, state.defaults.default_model, state.models, rng, ordered)
    if grant is not None:
        selection = within_grant(selection, grant, state.models, rng, plan)
    plan.selected_model = selection.model
    plan.candidates = selection.candidates
    plan.reason_code = "auto_routing" if selection.source == "decision" else "default_model"
    model = state.models.get(selection.model)
    plan.reliability = (decision.reliability if decision else None) or (model.reliability if model else None)
    plan.fallback = (decision.fallback if decision else None) or state.global_fallback
    served = {t.model for t in selection.candidates}
    plan.pricing = _pricing([m for name in served if (m := state.models.get(name)) is not None])
    return selection


def select_private(
    state: CompiledConfig,
    plan: RoutePlan,
    decision: Decision | None,
    rng: random.Random,
    grant: ModelGrant | None = None,
) -> Selection | None:
    """`pii` action `route`: the decision's models marked `private`, else every private model
    of the config, in order, never outside the key's grants; None when none has a backend (the
    caller blocks instead)."""
    refs = decision.modelRefs if decision is not None else []
    names = [r.model for r in refs if (m := state.models.get(r.model)) is not None and m.private]
    if not names:
        names = [m.name for m in state.config.providers.models if m.private]
    if grant is not None:
        names = [name for name in names if name in grant.models]
    candidates = candidates_for(names, state.models, rng)
    if not candidates:
        return None
    selected = candidates[0].model
    ref = next((r for r in refs if r.model == selected), None)
    plan.selected_model = selected
    plan.candidates = candidates
    plan.reason_code = "pii_policy_alternative_selected"
    model = state.models.get(selected)
    plan.reliability = model.reliability if model else None
    served = {t.model for t in candidates}
    plan.pricing = _pricing([m for name in served if (m := state.models.get(name)) is not None])
    return Selection(selected, ref, candidates, "decision")


async def learned_order(
    state: CompiledConfig, decision: Decision | None, ctx: SignalContext
) -> list[ModelRef] | None:
    """The decision's modelRefs in its learned selector's order (knn, mlp, automix), else None.
    A selector that fails (the encoder down) leaves the static order unless `on_error: fail`."""
    selector = state.selectors.get(decision.name) if decision is not None else None
    if selector is None or decision is None:
        return None
    try:
        return await selector.order(ctx.query_vector, ctx.token_count)
    except Exception as exc:
        if decision.algorithm.on_error == "fail":
            raise
        log.warning("decision %s: %s selection failed (%s); static order", decision.name, selector.kind, exc)
        return None


def pass_through(
    state: DirectRoutes, plan: RoutePlan, rng: random.Random, grant: ModelGrant | None = None
) -> None:
    """An explicit model: no signals, no plugins, no cache; 404 when it is not configured,
    403 when the key's grants leave it out."""
    model = state.models.get(plan.requested_model)
    if model is None:
        raise ModelNotFoundError(plan.requested_model)
    check_explicit(model.name, grant)
    _direct(state, plan, model, "model_specified", rng)


def routing_disabled(
    state: DirectRoutes, plan: RoutePlan, rng: random.Random, grant: ModelGrant | None = None
) -> None:
    """`global.router.enabled: false` (routing consumers off, the frontend and the native
    API kept): an auto request goes to the default model with no signals, guards, plugins or
    cache, reason `router_disabled`; without a default model it is a 400 `no_route`."""
    default = state.defaults.default_model
    model = state.models.get(default) if default else None
    if model is None:
        raise NoRouteError("unable to route request: routing is disabled and no default model is configured")
    check_explicit(model.name, grant)
    _direct(state, plan, model, "router_disabled", rng)


def _direct(
    state: DirectRoutes, plan: RoutePlan, model: ProviderModel, reason: str, rng: random.Random
) -> None:
    candidates = candidates_for([model.name], state.models, rng)
    if not candidates:
        raise NoRouteError(f"unable to route request: model {model.name!r} has no backend_refs")
    plan.reason_code = reason
    plan.selected_model = model.name
    plan.candidates = candidates
    plan.reliability = model.reliability
    plan.fallback = state.global_fallback
    plan.pricing = _pricing([model])
    fill_routing_headers(plan, "bypass")


def serve_model(state: CompiledConfig, plan: RoutePlan, name: str, rng: random.Random) -> None:
    """Serve the routed `plan` by model `name` instead of the selected one (session-aware
    routing keeps a session's model): its candidates first, then the routed ones of other
    models as the fallback (the decision's `fallback` still decides how many are tried: a
    held model that is down does not fail the turn), its reliability and pricing; the
    decision stays. Nothing changes when `name` has no backend."""
    model = state.models.get(name)
    candidates = candidates_for([name], state.models, rng) if model is not None else []
    if model is None or not candidates:
        return
    plan.selected_model = name
    plan.candidates = candidates + [c for c in plan.candidates if c.model != name]
    plan.reliability = plan.reliability or model.reliability  # the decision's, when it has one
    plan.pricing = {**plan.pricing, **_pricing([model])}


def _pricing(models: list[ProviderModel]) -> dict[str, Pricing]:
    return {m.name: m.pricing for m in models if m.pricing is not None}
