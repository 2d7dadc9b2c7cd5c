"""The decision engine: rule trees over signal results, and the winner by strategy.

Pure functions over config objects and `SignalMatch`es, no I/O (reference:
`pkg/decision/engine.go`):
- leaf `{type, name}`: the signal's `matched`, confidence = its confidence. A leaf
  whose signal errored (or was not evaluated: no evaluator for the type) follows its
  `on_error`: `match` -> matched with confidence 1.0 (the reference's default leaf
  confidence), `no_match` (default) -> not matched.
- AND: all children match; confidence = mean of the children's confidences.
- OR: any child matches; confidence = max over the matching children.
- NOT: exactly one child, negated; confidence = 1 - the child's confidence (a child
  that did not match usually reports 0, so NOT of it is 1.0).
- no `rules`: always matches with confidence 1.0 (a catch-all).

Winner among all matching decisions:
- strategy `priority` (default): higher priority, then higher confidence, then name asc;
- strategy `confidence`: higher confidence, then higher priority, then name asc;
- tiers: when ANY configured decision has `tier > 0`, the lowest tier wins first, then
  confidence, priority, name (the strategy is not consulted). `tier: 0` is the field's
  default and means "untiered": such decisions rank after every tiered one, so tagging
  a few decisions `tier: 1` puts them first without renumbering the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.config.routing import Condition, Decision
from app.pipeline.plan import SignalMatch

SignalKey = tuple[str, str]  # (type, name)


@dataclass(frozen=True, slots=True)
class RuleResult:
    matched: bool
    confidence: float


@dataclass(frozen=True, slots=True)
class DecisionMatch:
    decision: Decision
    confidence: float

    @property
    def name(self) -> str:
        return self.decision.name


_NO_MATCH = RuleResult(False, 0.0)
_CATCH_ALL = RuleResult(True, 1.0)


def evaluate_rule(node: Condition | None, signals: Mapping[SignalKey, SignalMatch]) -> RuleResult:
    if node is None:
        return _CATCH_ALL
    if node.operator is None:  # a leaf
        found = signals.get((node.type or "", node.name or ""))
        if found is None or found.error is not None:
            return RuleResult(True, 1.0) if node.on_error == "match" else _NO_MATCH
        return RuleResult(found.matched, _clamp(found.confidence))
    children = [evaluate_rule(child, signals) for child in node.conditions]
    if node.operator == "AND":
        if all(c.matched for c in children):
            return RuleResult(True, sum(c.confidence for c in children) / len(children))
        return _NO_MATCH
    if node.operator == "OR":
        hits = [c.confidence for c in children if c.matched]
        return RuleResult(True, max(hits)) if hits else _NO_MATCH
    # NOT (the config model guarantees exactly one child)
    child = children[0]
    return RuleResult(not child.matched, _clamp(1.0 - child.confidence))


def match_decisions(
    decisions: Iterable[Decision], signals: Mapping[SignalKey, SignalMatch]
) -> list[DecisionMatch]:
    out = []
    for decision in decisions:
        result = evaluate_rule(decision.rules, signals)
        if result.matched:
            out.append(DecisionMatch(decision, result.confidence))
    return out


def uses_tiers(decisions: Iterable[Decision]) -> bool:
    return any(d.tier > 0 for d in decisions)


def rank(
    matches: Sequence[DecisionMatch], strategy: str = "priority", tiered: bool = False
) -> list[DecisionMatch]:
    """Matching decisions, best first."""
    if tiered:

        def key(m: DecisionMatch) -> tuple:
            tier = m.decision.tier if m.decision.tier > 0 else math.inf
            return (tier, -m.confidence, -m.decision.priority, m.decision.name)
    elif strategy == "confidence":

        def key(m: DecisionMatch) -> tuple:
            return (-m.confidence, -m.decision.priority, m.decision.name)
    else:

        def key(m: DecisionMatch) -> tuple:
            return (-m.decision.priority, -m.confidence, m.decision.name)

    return sorted(matches, key=key)


def select_decision(
    decisions: Sequence[Decision],
    signals: Mapping[SignalKey, SignalMatch],
    strategy: str = "priority",
    tiered: bool | None = None,
) -> tuple[DecisionMatch | None, list[DecisionMatch]]:
    """(winner or None, all matches ranked best first). `tiered`: precomputed
    `uses_tiers(decisions)` (computed here when None)."""
    if tiered is None:
        tiered = uses_tiers(decisions)
    ranked = rank(match_decisions(decisions, signals), strategy, tiered)
    return (ranked[0] if ranked else None), ranked


def leaves(node: Condition | None) -> Iterable[Condition]:
    if node is None:
        return
    if node.operator is None:
        yield node
        return
    for child in node.conditions:
        yield from leaves(child)


def referenced_signals(decisions: Iterable[Decision]) -> dict[str, frozenset[str]]:
    """Signal rule names each family must evaluate: only those some decision uses."""
    found: dict[str, set[str]] = {}
    for decision in decisions:
        for leaf in leaves(decision.rules):
            found.setdefault(leaf.type or "", set()).add(leaf.name or "")
    return {family: frozenset(names) for family, names in found.items()}


def index_matches(matches: Iterable[SignalMatch]) -> dict[SignalKey, SignalMatch]:
    return {(m.type, m.name): m for m in matches}


def _clamp(value: float) -> float:
    if value != value:  # NaN from a misbehaving evaluator
        return 0.0
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else float(value)
