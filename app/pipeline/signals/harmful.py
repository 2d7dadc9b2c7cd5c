"""Harmful-content signals: `routing.signals.harmful[]` and the global prompt guard's
`harmful` part (`global.model_catalog.modules.prompt_guard.harmful`).

A rule `{name, threshold, categories, include_history}` matches when the harmful-content
classifier's probability of the rule's categories (every harm category when empty) reaches
`threshold`. The text is the human's ask, or with `include_history` the conversation text as
paragraphs (app/common/chat_text.py). For the ask the request's shared query embedding is
passed along, so an engine on the Router's vector space does not encode it again. Confidence
is the score, also when not matched (so `NOT` works).

The classifier is a `SignalEngine` (app/runtime/signal_engine.py): the head in the Router or
the Guard deployment; tests pass a fake.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np

from app.config.document import RouterConfig
from app.config.signals import CASCADE_KEYS, HarmfulSignal
from app.pipeline.signals.band_judge import build_band_judge
from app.pipeline.signals.base import EvaluatorFactory
from app.pipeline.signals.domain import unit_float
from app.pipeline.signals.guarded import TextRuleEvaluator
from app.pipeline.signals.jailbreak import prompt_guard_settings
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest
from app.runtime.signal_readers import harmful_result

FAMILY = "harmful"
PROMPT_GUARD_RULE = "global:prompt_guard:harmful"


@overload
def prompt_guard_harmful_rule(config: RouterConfig) -> HarmfulSignal | None: ...
@overload
def prompt_guard_harmful_rule(config: RouterConfig, require_enabled: Literal[False]) -> HarmfulSignal: ...


def prompt_guard_harmful_rule(config: RouterConfig, require_enabled: bool = True) -> HarmfulSignal | None:
    """`prompt_guard.harmful` as a rule when enabled: every auto request is checked.
    `harmful: true` or `harmful: {enabled: true, threshold, categories, include_history}`.
    `require_enabled=False` (the diagnostics): its settings, or the defaults, enabled or not."""
    section = prompt_guard_settings(config)
    raw = section.get("harmful")
    if raw is True:
        raw = {"enabled": True}
    if not isinstance(raw, dict):
        raw = {}
    if require_enabled and (section.get("enabled") is not True or raw.get("enabled") is not True):
        return None
    fields: dict[str, Any] = {"name": PROMPT_GUARD_RULE}
    threshold = unit_float(raw.get("threshold"))
    if threshold is not None:
        fields["threshold"] = threshold
    for key in ("categories", "include_history", "read", *CASCADE_KEYS):
        if key in raw:
            fields[key] = raw[key]
    for key in ("read", *CASCADE_KEYS):  # the guard's own settings, unless the part sets its own
        if key not in raw and isinstance(section.get(key), list):
            fields[key] = section[key]
    try:
        return HarmfulSignal(**fields)
    except ValueError:
        if require_enabled:  # validation rejects such a config; only the diagnostics get here
            raise
        return HarmfulSignal(name=PROMPT_GUARD_RULE)


class HarmfulEvaluator(TextRuleEvaluator[HarmfulSignal]):
    family = FAMILY
    detector = "harmful-content classifier"

    @classmethod
    def from_config(cls, config: RouterConfig, engine: SignalEngine | None) -> HarmfulEvaluator:
        return cls(config.routing.signals.harmful, engine, None)

    def _request(
        self, text: str, vectors: np.ndarray | None, threshold: float, rule: HarmfulSignal
    ) -> SignalRequest:
        categories = list(rule.categories) or None
        return SignalRequest(texts=[text], vectors=vectors, threshold=threshold, labels=categories)

    def _judge(
        self, item: SignalItem, threshold: float, rule: HarmfulSignal
    ) -> tuple[bool, float, dict[str, Any]]:
        result = harmful_result(item, threshold, rule.categories)
        detail = {
            "score": result.score,
            "threshold": threshold,
            "category": result.category,
            "categories": dict(result.categories),
            "detection_types": list(result.detection_types),
        }
        return result.is_harmful, result.score, detail


def harmful_factory(engine: SignalEngine | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["harmful"]` entry over the graph's harmful-content engine."""

    def factory(config: RouterConfig, services: Any = None) -> HarmfulEvaluator:
        evaluator = HarmfulEvaluator.from_config(config, engine)
        # rules with a cascade_band ask the band judge about uncertain scores
        evaluator.cascade = build_band_judge(config, services)
        return evaluator

    return factory
