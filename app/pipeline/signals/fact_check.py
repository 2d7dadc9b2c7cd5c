"""Fact-check signals: `routing.signals.fact_check[]` (`{name: needs_fact_check |
no_fact_check_needed, description, threshold}`).

The fact-check head (app/models/fact_check.py) reads the request's sentence vector, the one
the embedding, preference and complexity families share (one encoder pass per request); a
rule matches when the probability of its label reaches its threshold.
"""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.config.semantic_signals import FactCheckSignal
from app.models.fact_check import FactCheckHead, shared_fact_check_head
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.labels import LabelFamily

FAMILY = "fact_check"


class FactCheckEvaluator(LabelFamily):
    family = FAMILY

    def __init__(self, rules: list[FactCheckSignal]) -> None:
        super().__init__(rules)
        self._head: FactCheckHead | None = None

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> FactCheckEvaluator:
        return cls(config.routing.signals.fact_check)

    async def warm_up(self) -> None:
        if self._rules and self._head is None:
            self._head = shared_fact_check_head()  # 2 KB

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        if not ctx.text:
            return {}, {"reason": "no user text"}
        assert self._head is not None
        labels = self._head.labels(await ctx.query_vector())
        return labels, {"probabilities": {label: round(p, 4) for label, p in labels.items()}}
