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
from collections.abc import Callable, Iterable, Mapping, Sequence
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


# A compiled rule: (matched, confidence) for one request's indexed signal results.
RuleFn = Callable[[Mapping[SignalKey, SignalMatch]], tuple[bool, float]]
_NO = (False, 0.0)
_YES = (True, 1.0)


def compile_rule(node: Condition | None) -> RuleFn:
    """A rule tree as nested closures, built once per config version: evaluating it reads no
    config object, and AND stops at its first unmatched child (children have no side effects,
    so the result is the same as evaluating them all). 100 decisions evaluate in a fraction of
    the time the tree walk took (bench/bench_decisions.py)."""
    if node is None:
        return lambda _signals: _YES
    if node.operator is None:
        return _compile_leaf((node.type or "", node.name or ""), node.on_error == "match")
    children = [compile_rule(child) for child in node.conditions]
    if node.operator == "AND":
        return _compile_all(children)
    if node.operator == "OR":
        return _compile_any(children)
    return _compile_not(children[0])  # NOT: the config model guarantees exactly one child


def _compile_leaf(key: SignalKey, on_error_matches: bool) -> RuleFn:
    missing = _YES if on_error_matches else _NO

    def leaf(signals: Mapping[SignalKey, SignalMatch]) -> tuple[bool, float]:
        found = signals.get(key)
        if found is None or found.error is not None:
            return missing
        return found.matched, _clamp(found.confidence)

    return leaf


def _compile_all(children: list[RuleFn]) -> RuleFn:
    count = len(children)

    def all_of(signals: Mapping[SignalKey, SignalMatch]) -> tuple[bool, float]:
        total = 0.0
        for child in children:
            matched, confidence = child(signals)
            if not matched:
                return _NO
            total += confidence
        return True, total / count

    return all_of


def _compile_any(children: list[RuleFn]) -> RuleFn:
    def any_of(signals: Mapping[SignalKey, SignalMatch]) -> tuple[bool, float]:
        best = -1.0
        for child in children:
            matched, confidence = child(signals)
            if matched and confidence > best:
                best = confidence
        return (True, best) if best >= 0.0 else _NO

    return any_of


def _compile_not(child: RuleFn) -> RuleFn:
    def none_of(signals: Mapping[SignalKey, SignalMatch]) -> tuple[bool, float]:
        matched, confidence = child(signals)
        return not matched, _clamp(1.0 - confidence)

    return none_of


def evaluate_rule(node: Condition | None, signals: Mapping[SignalKey, SignalMatch]) -> RuleResult:
    """One rule, once (tests, previews); route() evaluates a DecisionTable compiled per config."""
    return RuleResult(*compile_rule(node)(signals))


class DecisionTable:
    """A config version's decisions with their rules compiled (compile_rule), and the ranking
    key of its strategy; `select` is the decide phase of every request."""

    def __init__(self, decisions: Sequence[Decision], strategy: str = "priority") -> None:
        self.decisions = list(decisions)
        self.tiered = uses_tiers(self.decisions)
        self.strategy = strategy
        self._rules = [(decision, compile_rule(decision.rules)) for decision in self.decisions]

    def matches(self, signals: Mapping[SignalKey, SignalMatch]) -> list[DecisionMatch]:
        out = []
        for decision, rule in self._rules:
            matched, confidence = rule(signals)
            if matched:
                out.append(DecisionMatch(decision, confidence))
        return out

    def select(
        self, signals: Mapping[SignalKey, SignalMatch]
    ) -> tuple[DecisionMatch | None, list[DecisionMatch]]:
        """(winner or None, all matches ranked best first)."""
        ranked = rank(self.matches(signals), self.strategy, self.tiered)
        return (ranked[0] if ranked else None), ranked


def match_decisions(
    decisions: Iterable[Decision], signals: Mapping[SignalKey, SignalMatch]
) -> list[DecisionMatch]:
    return DecisionTable(list(decisions)).matches(signals)


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
    decisions: Sequence[Decision], signals: Mapping[SignalKey, SignalMatch], strategy: str = "priority"
) -> tuple[DecisionMatch | None, list[DecisionMatch]]:
    """(winner or None, all matches ranked best first), compiling the rules for this one call;
    route() keeps a DecisionTable per config version."""
    return DecisionTable(decisions, strategy).select(signals)


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
