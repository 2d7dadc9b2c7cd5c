"""Fact-check signals: `routing.signals.fact_check[]` (`{name: needs_fact_check |
no_fact_check_needed, description, threshold}`).

The fact-check head (app/models/fact_check.py) reads the request's sentence vector, the one
the embedding, preference and complexity families share (one encoder pass per request); a
rule matches when the probability of its label reaches its threshold. The head is an
in-process `SignalEngine` (`FactCheckEngine`) on the Router's vector space; a
`fact_check_classifier` binding puts the family on a deployment's workers instead
(app/pipeline/signals/runtime.py).
"""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.config.semantic_signals import FactCheckSignal
from app.models.fact_check import shared_fact_check_head
from app.pipeline.signals.labels import EngineLabels
from app.runtime.signal_engine import SignalItem, SignalRequest

FAMILY = "fact_check"


class FactCheckEngine:
    """The fact-check head on the vectors the caller holds (label_probabilities); loaded on
    first use (2 KB)."""

    name = "fact-check head"
    reads_vectors = True

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        if request.vectors is None:
            raise RuntimeError("the fact-check head reads the request's vector and none was given")
        head = shared_fact_check_head()
        return [SignalItem(probabilities=head.labels(vector)) for vector in request.vectors]

    def failed(self, reason: str) -> Exception:
        return RuntimeError(reason)


class FactCheckEvaluator(EngineLabels):
    def __init__(self, rules: list[FactCheckSignal]) -> None:
        super().__init__(FAMILY, rules, FactCheckEngine())

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> FactCheckEvaluator:
        return cls(config.routing.signals.fact_check)

    async def warm_up(self) -> None:
        if self._rules:
            shared_fact_check_head()  # loaded before traffic, not on the first request
