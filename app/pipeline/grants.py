"""An API key's grants and budget applied to a selection (docs/security.md "Keys and budgets").

- Grants: the candidates keep only granted models, in the decision's order; when the decision
  names none of them, the granted models in the key's order answer (a MoM request never leaves
  the grants). An explicit model outside them is 403 `model_not_granted`, and so is a request
  no granted model can serve.
- Step-down: a key past its budget's `step_down_at` keeps only models cheaper (prompt plus
  completion price per 1M tokens; unpriced is free) than the one the decision picked: the
  decision's cheaper models first, else the cheaper granted models, cheapest first. A pick that
  is already the cheapest granted model stays. `plan.budget` and `x-vsr-budget` say so.
"""

from __future__ import annotations

import random

from app.keys.gate import ModelNotGranted
from app.keys.grant import ModelGrant
from app.pipeline.plan import RoutePlan
from app.pipeline.selection import ModelIndex, Selection, candidates_for
from app.upstream.targets import UpstreamTarget

BUDGET_HEADER = "x-vsr-budget"


def check_explicit(model: str, grant: ModelGrant | None) -> None:
    """403 for an explicit model outside the grants."""
    if grant is not None and model not in grant.models:
        raise ModelNotGranted(model, grant.models)


def price(models: ModelIndex, name: str) -> float:
    model = models.get(name)
    pricing = model.pricing if model is not None else None
    return 0.0 if pricing is None else pricing.prompt_per_1m + pricing.completion_per_1m


def within_grant(
    selection: Selection, grant: ModelGrant, models: ModelIndex, rng: random.Random, plan: RoutePlan
) -> Selection:
    allowed = set(grant.models)
    candidates = [t for t in selection.candidates if t.model in allowed]
    if not candidates:
        candidates = candidates_for(grant.models, models, rng)
    if not candidates:
        raise ModelNotGranted(selection.model, grant.models)
    picked = candidates[0].model
    if grant.step_down:
        candidates = _cheaper(candidates, grant, models, rng)
        plan.budget = {
            "state": "step_down",
            "spent_usd": grant.spent_usd,
            "limit_usd": grant.limit_usd,
            "from_model": picked,
            "to_model": candidates[0].model,
        }
        plan.response_headers[BUDGET_HEADER] = "step_down"
    model = candidates[0].model
    ref = selection.ref if model == selection.model else None
    return Selection(model, ref, candidates, selection.source)


def _cheaper(
    candidates: list[UpstreamTarget], grant: ModelGrant, models: ModelIndex, rng: random.Random
) -> list[UpstreamTarget]:
    top = price(models, candidates[0].model)
    cheaper = [t for t in candidates if price(models, t.model) < top]
    if cheaper:
        return cheaper
    ranked = sorted((m for m in grant.models if price(models, m) < top), key=lambda m: price(models, m))
    return candidates_for(ranked, models, rng) or candidates
