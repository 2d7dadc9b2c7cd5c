"""`svc-sr recipe plan`: what `recipe apply -f` would change, written nowhere.

The router checks the put (POST /api/v1/config/recipes/validate: valid, changed, ETags,
reasons, the recipe as it would be persisted); the current recipe (GET, 404: a new one) is
diffed against it here, by decision name and by signal `family/name`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Changes(BaseModel):
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)


class RecipePlan(BaseModel):
    name: str
    valid: bool
    changed: bool
    created: bool = Field(description="no recipe of this name exists yet")
    current_etag: str
    candidate_etag: str | None = None
    restart_required: bool = False
    description_changed: bool = False
    strategy_changed: bool = False
    decisions: Changes
    signals: Changes
    warnings: list[str] = Field(default_factory=list)


def diff(current: dict[str, Any], candidate: dict[str, Any]) -> Changes:
    return Changes(
        added=[k for k in candidate if k not in current],
        removed=[k for k in current if k not in candidate],
        changed=[k for k in candidate if k in current and current[k] != candidate[k]],
    )


def decisions_by_name(routing: dict[str, Any]) -> dict[str, Any]:
    return {str(d.get("name")): d for d in routing.get("decisions") or [] if isinstance(d, dict)}


def signals_by_name(routing: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family, rules in (routing.get("signals") or {}).items():
        for rule in rules if isinstance(rules, list) else []:
            if isinstance(rule, dict):
                out[f"{family}/{rule.get('name')}"] = rule
    return out


def plan(name: str, answer: dict[str, Any], current: dict[str, Any] | None) -> RecipePlan:
    """The plan from a validate answer and the current recipe view (None: none yet)."""
    before: dict[str, Any] = (current or {}).get("routing") or {}
    candidate = answer.get("recipe") or {}
    after: dict[str, Any] = candidate.get("routing") or {}
    return RecipePlan(
        name=name,
        valid=answer["valid"],
        changed=answer["changed"],
        created=current is None,
        current_etag=answer["current_etag"],
        candidate_etag=answer.get("candidate_etag"),
        restart_required=answer.get("restart_required", False),
        description_changed=current is not None
        and current.get("description") != candidate.get("description"),
        strategy_changed=before.get("strategy", "priority") != after.get("strategy", "priority"),
        decisions=diff(decisions_by_name(before), decisions_by_name(after)),
        signals=diff(signals_by_name(before), signals_by_name(after)),
        warnings=answer.get("warnings", []),
    )
