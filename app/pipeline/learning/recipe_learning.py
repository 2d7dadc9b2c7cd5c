"""Recipe learning: what the replay records and their outcomes say about each decision's
models, and the decision changes they support, as a configuration plan nobody has applied.

`svc-sr optimize recipe-learning` feeds this with the newest replay records
(GET /api/v1/observability/replays) and the outcomes submitted for them
(GET /api/v1/observability/outcomes). An outcome counts for the model that answered its
request (`served_model`, else `selected_model`); its result in [0, 1] is read the way the
Elo ratings read it (`outcome_score`: a score, else the verdict word), so both learners
agree on what "good" means.

What is proposed, per `algorithm.type: static` decision of the active configuration that
lists several models (the static selection takes the first modelRef; elo decisions already
learn from outcomes online, and the other algorithms do not take the first):
- `prefer_model`: another of the decision's models has a mean outcome at least `margin`
  above the model listed first, each with `min_outcomes` outcomes at least: it moves to the
  front of `modelRefs` (the static selection takes the first; the rest stay fallbacks);
- `prefer_cheaper`: the models are within `margin` of each other, and one listed later costs
  less per request on the same records: it moves to the front.
Refusals an operator marked wrong propose guard thresholds and PII policies
(app/pipeline/learning/guard_learning.py), in the same plan.
Nothing else is touched; with too little evidence nothing is proposed and the report says why.
The plan is the proposed document (the current one with those decisions reordered) for
`svc-sr config plan/apply --config FILE`: learning never applies a change by itself.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from statistics import fmean
from typing import Any, Literal

from pydantic import BaseModel

from app.pipeline.learning.guard_learning import GuardReport, learn_guards
from app.replays.replays import outcome_score

DEFAULT_MIN_OUTCOMES = 5
DEFAULT_MARGIN = 0.1


class ModelEvidence(BaseModel):
    model: str
    requests: int
    errors: int
    outcomes: int
    mean_outcome: float | None
    mean_latency_ms: float | None
    mean_cost: float | None


class DecisionEvidence(BaseModel):
    decision: str
    listed: list[str]  # the decision's modelRefs, in order
    models: list[ModelEvidence]


class Proposal(BaseModel):
    decision: str
    change: Literal["prefer_model", "prefer_cheaper"]
    current_first: str
    proposed_first: str
    reason: str


class LearningReport(BaseModel):
    records: int
    outcomes_joined: int
    decisions: list[DecisionEvidence]
    proposals: list[Proposal]
    skipped: dict[str, str]  # decision -> why nothing was proposed
    guards: GuardReport  # refusals marked wrong or right, and the guard changes they support
    proposed_document: dict[str, Any] | None  # None: no change proposed


def _answering_model(record: dict[str, Any]) -> str | None:
    model = record.get("served_model") or record.get("selected_model")
    return str(model) if model else None


def _mean(values: list[float]) -> float | None:
    return round(fmean(values), 6) if values else None


def model_evidence(
    records: list[dict[str, Any]], outcomes: list[dict[str, Any]]
) -> tuple[dict[str, dict[str, ModelEvidence]], int]:
    """decision -> model -> evidence, and how many outcomes named a record in `records`."""
    results: dict[str, list[float]] = defaultdict(list)
    joined = 0
    for outcome in outcomes:
        score = outcome_score(str(outcome.get("verdict", "")), outcome.get("score"))
        if score is not None:
            results[str(outcome.get("replay_id"))].append(score)
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        model, decision = _answering_model(record), record.get("decision")
        if model and decision and not record.get("cache_hit"):
            grouped[(str(decision), model)].append(record)
    evidence: dict[str, dict[str, ModelEvidence]] = defaultdict(dict)
    for (decision, model), rows in grouped.items():
        scores = [s for r in rows for s in results.get(str(r.get("id")), [])]
        joined += sum(1 for r in rows if str(r.get("id")) in results)
        costs = [float(r["cost"]["amount"]) for r in rows if isinstance(r.get("cost"), dict)]
        latencies = [float(r["latency_ms"]) for r in rows if isinstance(r.get("latency_ms"), int | float)]
        evidence[decision][model] = ModelEvidence(
            model=model,
            requests=len(rows),
            errors=sum(1 for r in rows if r.get("error") or int(r.get("status") or 200) >= 400),
            outcomes=len(scores),
            mean_outcome=_mean(scores),
            mean_latency_ms=_mean(latencies),
            mean_cost=_mean(costs),
        )
    return evidence, joined


def _propose(
    decision: str, listed: list[str], seen: dict[str, ModelEvidence], min_outcomes: int, margin: float
) -> Proposal | str:
    """One proposal for the decision, or why there is none."""
    first = listed[0]
    rated = {m: e for m, e in seen.items() if m in listed and e.outcomes >= min_outcomes}
    if first not in rated:
        return f"{first} (listed first) has fewer than {min_outcomes} outcomes"
    others = {m: e for m, e in rated.items() if m != first}
    if not others:
        return f"no other model of the decision has {min_outcomes} outcomes"
    head = rated[first].mean_outcome or 0.0
    best = max(others.values(), key=lambda e: (e.mean_outcome or 0.0, -listed.index(e.model)))
    if (best.mean_outcome or 0.0) >= head + margin:
        return Proposal(
            decision=decision,
            change="prefer_model",
            current_first=first,
            proposed_first=best.model,
            reason=f"mean outcome {best.mean_outcome:.3f} over {best.outcomes} vs {head:.3f} over "
            f"{rated[first].outcomes} for {first} (margin {margin:g})",
        )
    close = [e for e in others.values() if abs((e.mean_outcome or 0.0) - head) < margin]
    cheaper = [e for e in close if e.mean_cost is not None and e.mean_cost < (rated[first].mean_cost or 0.0)]
    if cheaper:
        pick = min(cheaper, key=lambda e: e.mean_cost or 0.0)
        return Proposal(
            decision=decision,
            change="prefer_cheaper",
            current_first=first,
            proposed_first=pick.model,
            reason=f"outcomes within {margin:g} ({pick.mean_outcome:.3f} vs {head:.3f}) at "
            f"{pick.mean_cost:g} vs {rated[first].mean_cost:g} per request",
        )
    return f"{first} is as good as any other rated model and no cheaper one is as good"


def learn(
    document: dict[str, Any],
    records: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    min_outcomes: int = DEFAULT_MIN_OUTCOMES,
    margin: float = DEFAULT_MARGIN,
) -> LearningReport:
    """The report over `document` (the active configuration, canonical v0.3)."""
    evidence, joined = model_evidence(records, outcomes)
    decisions: list[DecisionEvidence] = []
    proposals: list[Proposal] = []
    skipped: dict[str, str] = {}
    proposed = copy.deepcopy(document)
    for entry in proposed.get("routing", {}).get("decisions", []):
        name = str(entry.get("name"))
        listed = [str(ref.get("model")) for ref in entry.get("modelRefs", [])]
        seen = evidence.get(name, {})
        decisions.append(DecisionEvidence(decision=name, listed=listed, models=list(seen.values())))
        algorithm = (entry.get("algorithm") or {}).get("type", "static")
        if algorithm == "elo":
            skipped[name] = "an elo decision learns from outcomes online"
            continue
        if algorithm != "static":
            skipped[name] = f"algorithm {algorithm} does not take the first model: not reordered"
            continue
        if len(listed) < 2:
            skipped[name] = "one model listed: nothing to choose"
            continue
        found = _propose(name, listed, seen, min_outcomes, margin)
        if isinstance(found, str):
            skipped[name] = found
            continue
        proposals.append(found)
        refs = entry["modelRefs"]
        refs.insert(0, refs.pop(listed.index(found.proposed_first)))
    guards, guards_changed = learn_guards(proposed, records, outcomes, min_outcomes)
    return LearningReport(
        records=len(records),
        outcomes_joined=joined,
        decisions=decisions,
        proposals=proposals,
        skipped=skipped,
        guards=guards,
        proposed_document=proposed if proposals or guards_changed else None,
    )
