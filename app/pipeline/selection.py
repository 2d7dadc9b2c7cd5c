"""Model selection: from a decision (or the default / an explicit model) to the ordered
upstream candidates the front door tries.

- `algorithm.type: static` (default): the decision's first modelRef is selected, the
  others follow in config order as fallback candidates.
- `algorithm.type: weighted`: the selected model is drawn at random with probability
  proportional to `modelRefs[].weight` (unset = 1.0; all zero = config order); the
  others follow in config order.
- A model served in the cluster (`llm_config`) goes to its vLLM deployment first
  (app/llm/addressing.py); its `backend_refs`, if any, follow as the HTTP fallback.
- A model with several `backend_refs` expands to one target per backend: the first is
  drawn by backend `weight` (the decision's `preferred_endpoints`, when set, go
  first), the others follow as further candidates of the same model.

Everything random takes an injectable `random.Random`, so tests are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.common.errors import SvcError, model_not_found, no_route
from app.config.document import RouterConfig
from app.config.providers import BackendRef, ProviderModel
from app.config.routing import Decision, ModelRef
from app.llm import addressing
from app.upstream.targets import ANTHROPIC_VERSION, MESSAGES_API_FORMATS, UpstreamTarget


class RoutingError(SvcError):
    """A request the pipeline cannot route. A `SvcError`, so both front doors answer it
    with the data plane's documented error body and status."""


class ModelNotFoundError(RoutingError):
    """An explicit model that is neither configured nor an auto alias (404, model_not_found)."""

    def __init__(self, model: str) -> None:
        base = model_not_found(model)
        super().__init__(base.status, base.message, base.type, base.code, param=base.param)
        self.model = model


class NoRouteError(RoutingError):
    """No decision matched and no default model is usable (400, no_route; reference wording)."""

    def __init__(self, message: str | None = None) -> None:
        base = no_route()
        super().__init__(base.status, message or base.message, base.type, base.code, param=base.param)


def weighted_pick(weights: Sequence[float], rng: random.Random) -> int:
    """Index drawn with probability proportional to weight; index 0 when all are 0."""
    total = sum(w for w in weights if w > 0)
    if total <= 0:
        return 0
    point = rng.random() * total
    for index, weight in enumerate(weights):
        if weight <= 0:
            continue
        point -= weight
        if point < 0:
            return index
    return max(i for i, w in enumerate(weights) if w > 0)  # float round-off at the top end


def _first_then_rest(items: list[Any], first: int) -> list[Any]:
    return [items[first], *items[:first], *items[first + 1 :]]


def order_model_refs(decision: Decision, rng: random.Random) -> list[ModelRef]:
    refs = list(decision.modelRefs)
    if len(refs) > 1 and decision.algorithm.type == "weighted":
        weights = [1.0 if r.weight is None else r.weight for r in refs]
        refs = _first_then_rest(refs, weighted_pick(weights, rng))
    return refs


def backend_target(model: ProviderModel, ref: BackendRef) -> UpstreamTarget:
    headers = dict(ref.extra_headers)
    if ref.api_key and not ref.api_key_env:
        # A literal key in the file: sent as written by the reference router. A
        # messages-style backend takes it as `x-api-key` (no prefix) with `anthropic-version`,
        # as it would from api_key_env, unless auth_header/auth_prefix say otherwise.
        present = {name.lower() for name in headers}
        if model.api_format.strip().lower() in MESSAGES_API_FORMATS and not ref.auth_header:
            value = f"{ref.auth_prefix} {ref.api_key}" if ref.auth_prefix else ref.api_key
            if "x-api-key" not in present:
                headers["x-api-key"] = value
            if "anthropic-version" not in present:
                headers["anthropic-version"] = ANTHROPIC_VERSION
        elif (ref.auth_header or "authorization").lower() not in present:
            headers[ref.auth_header or "Authorization"] = f"{ref.auth_prefix or 'Bearer'} {ref.api_key}"
    return UpstreamTarget(
        model=model.name,
        provider_model_id=model.provider_model_id,
        base_url=ref.resolved_base_url(),
        chat_path=ref.chat_path,
        extra_headers=headers,
        api_key_env=ref.api_key_env,
        api_format=model.api_format,
        weight=ref.weight,
    )


def in_cluster_target(model: ProviderModel) -> UpstreamTarget | None:
    if model.llm_config is None:
        return None
    return UpstreamTarget(
        model=model.name,
        provider_model_id=model.llm_config.served_name(model.name),
        base_url=addressing.base_url(model.name),
    )


def model_targets(
    model: ProviderModel, rng: random.Random, preferred_endpoints: Sequence[str] = ()
) -> list[UpstreamTarget]:
    in_cluster = in_cluster_target(model)
    refs = list(model.backend_refs)
    if not refs:
        return [in_cluster] if in_cluster is not None else []
    if preferred_endpoints:
        preferred = [r for r in refs if r.name in preferred_endpoints]
        refs = preferred + [r for r in refs if r.name not in preferred_endpoints]
        head = len(preferred) or len(refs)
    else:
        head = len(refs)
    pool = refs[:head]
    if len(pool) > 1:
        refs = _first_then_rest(pool, weighted_pick([r.weight for r in pool], rng)) + refs[head:]
    http = [backend_target(model, r) for r in refs]
    return [in_cluster, *http] if in_cluster is not None else http


class ModelIndex:
    """Name -> provider model, built once per config (also resolves external_model_ids)."""

    def __init__(self, config: RouterConfig) -> None:
        self._by_name: dict[str, ProviderModel] = {}
        for model in config.providers.models:
            self._by_name.setdefault(model.name, model)
        for model in config.providers.models:
            for alias in model.external_model_ids.values():
                self._by_name.setdefault(alias, model)

    def get(self, name: str | None) -> ProviderModel | None:
        return self._by_name.get(name) if name else None


def candidates_for(
    model_names: Sequence[str],
    models: ModelIndex,
    rng: random.Random,
    preferred_endpoints: Sequence[str] = (),
) -> list[UpstreamTarget]:
    """Targets of each named model in order (unknown or backend-less models skipped)."""
    out: list[UpstreamTarget] = []
    seen: set[str] = set()
    for name in model_names:
        model = models.get(name)
        if model is None or model.name in seen:
            continue
        seen.add(model.name)
        out.extend(model_targets(model, rng, preferred_endpoints))
    return out


@dataclass(frozen=True)
class Selection:
    model: str  # the selected (first) model's configured name
    ref: ModelRef | None  # its modelRef in the decision (None for the default model)
    candidates: list[UpstreamTarget]  # selected first, then fallbacks
    source: str  # "decision" | "default_model"


def select_for_decision(
    decision: Decision | None,
    default_model: str | None,
    models: ModelIndex,
    rng: random.Random,
    ordered_refs: Sequence[ModelRef] | None = None,
) -> Selection:
    """The decision's models when it has usable ones, else `default_model`, else NoRouteError.
    `ordered_refs`: the decision's modelRefs as a learned selector ordered them (selectors.py)."""
    if decision is not None and decision.modelRefs:
        refs = list(ordered_refs) if ordered_refs is not None else order_model_refs(decision, rng)
        candidates = candidates_for([r.model for r in refs], models, rng, decision.preferred_endpoints)
        if candidates:
            selected = candidates[0].model
            ref = next((r for r in refs if _model_name(models, r.model) == selected), None)
            return Selection(selected, ref, candidates, "decision")
    if default_model:
        model = models.get(default_model)
        candidates = candidates_for([default_model], models, rng)
        if model is not None and candidates:
            return Selection(model.name, None, candidates, "default_model")
        raise NoRouteError(f"unable to route request: default model {default_model!r} has no usable backend")
    raise NoRouteError()


def _model_name(models: ModelIndex, name: str) -> str | None:
    model = models.get(name)
    return model.name if model else None
