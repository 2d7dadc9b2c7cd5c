"""Phase `decide`: the decision rules (`decisions.py`) over the plan's signal matches; the
winner's name and confidence go into the plan (confidence 0 when no decision matched)."""

from __future__ import annotations

from app.pipeline import decisions as engine
from app.pipeline.compiled import CompiledConfig
from app.pipeline.plan import RoutePlan


def decide(
    state: CompiledConfig, plan: RoutePlan
) -> tuple[engine.DecisionMatch | None, list[engine.DecisionMatch]]:
    """(the winning decision or None, every matching decision ranked best first)."""
    winner, ranked = state.decision_table.select(engine.index_matches(plan.signals.matches))
    if winner is not None:
        plan.decision = winner.name
        plan.confidence = winner.confidence
    else:
        plan.confidence = 0.0
    return winner, ranked
