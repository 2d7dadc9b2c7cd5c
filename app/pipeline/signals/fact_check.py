"""Fact-check signals: `routing.signals.fact_check[]` (`{name: needs_fact_check |
no_fact_check_needed, description, threshold}`).

The fact-check head (app/models/fact_check.py) reads the request's sentence vector, the one
the embedding, preference and complexity families share (one encoder pass per request); a
rule matches when the probability of its label reaches its threshold.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.config.models import RouterConfig
from app.config.semantic_signals import FactCheckSignal
from app.models.fact_check import FactCheckHead, shared_fact_check_head
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, error_matches

FAMILY = "fact_check"


class FactCheckEvaluator:
    family = FAMILY

    def __init__(self, rules: list[FactCheckSignal]) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._head: FactCheckHead | None = None

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> FactCheckEvaluator:
        return cls(config.routing.signals.fact_check)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        if self._rules and self._head is None:
            self._head = await asyncio.to_thread(shared_fact_check_head)

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(FAMILY, names - known, "no fact_check rule with that name")
        if not known:
            return out
        if not ctx.text:
            return out + [
                SignalMatch(
                    type=FAMILY, name=n, matched=False, confidence=0.0, detail={"reason": "no user text"}
                )
                for n in sorted(known)
            ]
        try:
            await self.warm_up()
            assert self._head is not None
            labels = self._head.labels(await ctx.query_vector())
        except Exception as exc:  # the encoder being down is a signal error, not a failed request
            return out + error_matches(FAMILY, known, f"fact-check failed: {exc}")
        detail = {"probabilities": {label: round(p, 4) for label, p in labels.items()}}
        for name in sorted(known):
            probability = labels[name]
            matched = probability >= self._rules[name].threshold
            out.append(
                SignalMatch(type=FAMILY, name=name, matched=matched, confidence=probability, detail=detail)
            )
        return out
