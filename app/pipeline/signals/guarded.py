"""Shared shape of the safety-signal evaluators (pii, jailbreak): named rules with a
per-rule threshold that falls back to the model's global one, judged by a detector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext

RuleT = TypeVar("RuleT")


class ThresholdRuleEvaluator(Generic[RuleT]):
    """`uses_vectors`: the detector takes the request's query vector (the graph's own models);
    a model-runtime binding encodes on the worker, so none is computed for it."""

    family: str = ""

    def __init__(
        self, rules: list[Any], detect: Any, default_threshold: float | None = None, uses_vectors: bool = True
    ) -> None:
        self._rules: dict[str, RuleT] = {rule.name: rule for rule in rules}
        self._detect = detect
        self.default_threshold = default_threshold
        self.uses_vectors = uses_vectors

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    def threshold_of(self, rule: Any) -> float:
        """A rule's own threshold when it sets one, else the model's global threshold."""
        if "threshold" in rule.model_fields_set or self.default_threshold is None:
            return rule.threshold
        return self.default_threshold

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = [self._rules[n] for n in sorted(names) if n in self._rules]
        out = [
            SignalMatch(
                type=self.family,
                name=n,
                matched=False,
                confidence=0.0,
                error=f"no {self.family} rule named {n!r}",
            )
            for n in sorted(names)
            if n not in self._rules
        ]
        return out + await self.evaluate_rules(ctx, known)

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[RuleT]) -> list[SignalMatch]:
        raise NotImplementedError
