"""PII signals: `routing.signals.pii[]` (and the `pii` decision plugin's policy check).

A rule `{name, threshold, pii_types_allowed, include_history}` MATCHES when the request
carries PII its policy does not allow (reference `pkg/utils/pii/policy.go`): entities
scoring below `threshold` are ignored; the request is allowed iff every detected type is
in `pii_types_allowed`; an empty allow-list denies any PII. `include_history` scans the
conversation text (every user turn) instead of the human's ask (app/common/chat_text.py).

One detector call per request: the distinct texts the requested rules need, at the lowest
of their thresholds; each rule then keeps the entities at or above its own threshold.
A rule that leaves `threshold` unset takes `global.model_catalog.modules.classifier.pii
.threshold` when configured (else the field's default, 0.5).

When every rule allows every type NER produces, the detector is asked for the pattern types
only and skips spaCy's NER (`detector_types`): those types could not change a match.

The detector is a `SignalEngine` (app/runtime/signal_engine.py) answering token spans: the
Router's pattern-only detector with the Guard deployment for NER, the Guard alone, or a
`pii_classifier` binding's workers; tests pass a fake.

Detail: `entities` (every type found, sorted; what `plan.security` reports), `denied`
(the types the policy refused), `detected`, and spans {type, start, end, confidence}.
Values are never copied into the detail: previews and logs must not leak the PII.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.config.document import RouterConfig
from app.config.signals import PIISignal
from app.models.pii import NER_DERIVED_TYPES, PII_ENTITY_TYPES, PIIResult, pii_policy_allows
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import (
    EvaluatorFactory,
    SignalContext,
    error_matches,
    unscanned_match,
)
from app.pipeline.signals.domain import catalog_section, unit_float
from app.pipeline.signals.guarded import ThresholdRuleEvaluator, ask
from app.runtime.signal_engine import SignalEngine, SignalRequest, UnscannedError
from app.runtime.signal_readers import UnusableAnswer, pii_result

FAMILY = "pii"


def pii_default_threshold(config: RouterConfig) -> float | None:
    return unit_float(catalog_section(config, "modules", "classifier", "pii").get("threshold"))


def detector_types(rules: Sequence[PIISignal]) -> list[str] | None:
    """The entity types the detector is asked for: every type (None), unless every rule allows
    every type NER produces (PERSON, ORGANIZATION, GPE, NRP, DATE_TIME; the shipped config's
    policy); then those cannot change a match, and the pattern types alone skip spaCy's NER
    pass, the detector's costliest step (~4 ms for a short prompt, ~50 ms at 500 tokens)."""
    for rule in rules:
        if not NER_DERIVED_TYPES.issubset(t.strip().upper() for t in rule.pii_types_allowed):
            return None
    return [t for t in PII_ENTITY_TYPES if t not in NER_DERIVED_TYPES]


class PIIEvaluator(ThresholdRuleEvaluator[PIISignal]):
    family = FAMILY

    @classmethod
    def from_config(cls, config: RouterConfig, engine: SignalEngine | None) -> PIIEvaluator:
        return cls(config.routing.signals.pii, engine, pii_default_threshold(config))

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[PIISignal]) -> list[SignalMatch]:
        """Judge rules that need not be configured signals (the `pii` plugin builds one)."""
        if not rules:
            return []
        wanted = (ctx.whole_text_for(r.read, r.include_history) for r in rules)
        texts = list(dict.fromkeys(t for t in wanted if t.strip()))
        types = detector_types(rules)
        results: dict[str, PIIResult] = {}
        if texts:
            engine = self.engine
            if engine is None:
                return error_matches(FAMILY, {r.name for r in rules}, "no PII detector configured")
            cutoff = min(self.threshold_of(r) for r in rules)
            try:
                items = await ask(engine, SignalRequest(texts=texts, threshold=cutoff, labels=types))
                try:
                    results = {
                        t: pii_result(item, t, types, cutoff) for t, item in zip(texts, items, strict=True)
                    }
                except UnusableAnswer as exc:
                    raise engine.failed(str(exc)) from None
            except UnscannedError as exc:  # a model runtime that did not read it all (on_unscanned)
                return [unscanned_match(FAMILY, r.name, exc) for r in rules]
            except Exception as exc:  # a model failure is a signal error, not a 500
                return error_matches(FAMILY, {r.name for r in rules}, f"PII detection failed: {exc}")
        return [
            self._judge(rule, results.get(ctx.whole_text_for(rule.read, rule.include_history)))
            for rule in rules
        ]

    def _judge(self, rule: PIISignal, result: PIIResult | None) -> SignalMatch:
        threshold = self.threshold_of(rule)
        kept = [e for e in (result.entities if result else []) if e.confidence >= threshold]
        found = {e.type for e in kept}
        allowed = [t.strip().upper() for t in rule.pii_types_allowed]
        matched = not pii_policy_allows(found, allowed)
        denied = sorted(found - set(allowed))
        confidence = max((e.confidence for e in kept if e.type in denied), default=0.0) if matched else 0.0
        detail = {
            "detected": bool(found),
            "entities": sorted(found),
            "denied": denied if matched else [],
            "threshold": threshold,
            "spans": [
                {"type": e.type, "start": e.start, "end": e.end, "confidence": e.confidence} for e in kept
            ],
        }
        return SignalMatch(type=FAMILY, name=rule.name, matched=matched, confidence=confidence, detail=detail)


def pii_factory(engine: SignalEngine | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["pii"]` entry over the graph's PII engine."""

    def factory(config: RouterConfig, services: Any = None) -> PIIEvaluator:
        return PIIEvaluator.from_config(config, engine)

    return factory
