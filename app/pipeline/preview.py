"""The routing preview's answer: what route() decided for a request, with every configured
signal, the ranked decisions and the rewritten body, as a JSON-ready dict (no backend call,
no cache access; see RouterPipeline.preview)."""

from __future__ import annotations

from typing import Any

from app.pipeline.compiled import CompiledConfig
from app.pipeline.decisions import DecisionMatch
from app.pipeline.plan import RoutePlan
from app.pipeline.selection import NoRouteError


def no_route_preview(exc: NoRouteError) -> dict[str, Any]:
    return {
        "selection_status": "no_route",
        "selection_method": None,
        "selected_model": None,
        "error": exc.body()["error"],
    }


def preview_of(state: CompiledConfig, plan: RoutePlan, ranked: list[DecisionMatch]) -> dict[str, Any]:
    decision = state.plugins.get(plan.decision or "")
    status, method = _selection_status(state, plan)
    return {
        "request_id": plan.request_id,
        "requested_model": plan.requested_model,
        "auto": plan.auto,
        "recipe": plan.recipe,
        "decision": plan.decision,
        "selected_model": plan.selected_model,
        "confidence": plan.confidence,
        "reason_code": plan.reason_code,
        "selection_status": status,
        "selection_method": method,
        "selection_provenance": "preview",
        "matched_decisions": [
            {
                "name": m.name,
                "confidence": round(m.confidence, 4),
                "priority": m.decision.priority,
                "tier": m.decision.tier,
            }
            for m in ranked
        ],
        "candidates": [{"model": t.model, "target": t.label} for t in plan.candidates],
        "signals": [m.model_dump() for m in plan.signals.matches],
        "signal_errors": plan.signals.errors,
        "security_checks": plan.security.model_dump(),
        "reasoning": plan.reasoning,
        "fast_response": decision.fast_response if decision else None,
        "body": plan.body,
        "upstream_headers": plan.upstream_headers,
        "classification_ms": round(plan.classification_ms, 3),
        "session": plan.session.model_dump() if plan.session is not None else None,
    }


def _selection_status(state: CompiledConfig, plan: RoutePlan) -> tuple[str, str]:
    """(selection_status, selection_method) of a previewed plan."""
    immediate = plan.immediate.kind if plan.immediate is not None else None
    if immediate == "fast_response":
        return "not_required", "fast_response"
    if immediate == "block":
        return "blocked", plan.reason_code
    if not plan.auto:
        return "selected", "model_specified"
    if plan.reason_code == "default_model":
        return "selected", "default_model"
    chosen = next((d for d in state.decisions if d.name == plan.decision), None)
    return "selected", chosen.algorithm.type if chosen else "static"
