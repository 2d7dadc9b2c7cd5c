"""PII signals: `routing.signals.pii[]` (and the `pii` decision plugin's policy check).

A rule `{name, threshold, pii_types_allowed, include_history}` MATCHES when the request
carries PII its policy does not allow (reference `pkg/utils/pii/policy.go`): entities
scoring below `threshold` are ignored; the request is allowed iff every detected type is
in `pii_types_allowed`; an empty allow-list denies any PII. `include_history` scans every
user turn instead of the last one.

One detector call per request: the distinct texts the requested rules need, at the lowest
of their thresholds; each rule then keeps the entities at or above its own threshold.
A rule that leaves `threshold` unset takes `global.model_catalog.modules.classifier.pii
.threshold` when configured (else the field's default, 0.5).

Detail: `entities` (every type found, sorted; what `plan.security` reports), `denied`
(the types the policy refused), `detected`, and spans {type, start, end, confidence}.
Values are never copied into the detail: previews and logs must not leak the PII.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.config.models import PIISignal, RouterConfig
from app.models.pii import PIIResult, pii_policy_allows
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import EvaluatorFactory, SignalContext, error_matches
from app.pipeline.signals.domain import catalog_section, unit_float

FAMILY = "pii"

# (texts, entity_types or None, threshold or None) -> one PIIResult (or its dict) per text
PIIDetectFn = Callable[[list[str], list[str] | None, float | None], Awaitable[list[Any]]]


def pii_default_threshold(config: RouterConfig) -> float | None:
    return unit_float(catalog_section(config, "modules", "classifier", "pii").get("threshold"))


def rule_text(ctx: SignalContext, include_history: bool) -> str:
    return ctx.history_text if include_history else ctx.text


class PIIEvaluator:
    family = FAMILY

    def __init__(
        self, rules: list[PIISignal], detect: PIIDetectFn | None, default_threshold: float | None = None
    ) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._detect = detect
        self.default_threshold = default_threshold

    @classmethod
    def from_config(cls, config: RouterConfig, detect: PIIDetectFn | None) -> PIIEvaluator:
        return cls(config.routing.signals.pii, detect, pii_default_threshold(config))

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    def threshold_of(self, rule: PIISignal) -> float:
        if "threshold" in rule.model_fields_set or self.default_threshold is None:
            return rule.threshold
        return self.default_threshold

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = [self._rules[n] for n in sorted(names) if n in self._rules]
        out = [
            SignalMatch(type=FAMILY, name=n, matched=False, confidence=0.0, error=f"no pii rule named {n!r}")
            for n in sorted(names) if n not in self._rules
        ]
        return out + await self.evaluate_rules(ctx, known)

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[PIISignal]) -> list[SignalMatch]:
        """Judge rules that need not be configured signals (the `pii` plugin builds one)."""
        if not rules:
            return []
        wanted = (rule_text(ctx, r.include_history) for r in rules)
        texts = list(dict.fromkeys(t for t in wanted if t.strip()))
        results: dict[str, PIIResult] = {}
        if texts:
            if self._detect is None:
                return error_matches(FAMILY, {r.name for r in rules}, "no PII detector configured")
            cutoff = min(self.threshold_of(r) for r in rules)
            try:
                raw = await self._detect(texts, None, cutoff)
                if len(raw) != len(texts):
                    raise RuntimeError(f"PII detector returned {len(raw)} results for {len(texts)} texts")
                results = {t: PIIResult.model_validate(r) for t, r in zip(texts, raw, strict=True)}
            except Exception as exc:  # a model failure is a signal error, not a 500
                return error_matches(FAMILY, {r.name for r in rules}, f"PII detection failed: {exc}")
        return [self._judge(rule, results.get(rule_text(ctx, rule.include_history))) for rule in rules]

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
            "spans": [{"type": e.type, "start": e.start, "end": e.end, "confidence": e.confidence} for e in kept],
        }
        return SignalMatch(type=FAMILY, name=rule.name, matched=matched, confidence=confidence, detail=detail)


def pii_factory(detect: PIIDetectFn | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["pii"]` entry over a detect callable."""

    def factory(config: RouterConfig, services: Any = None) -> PIIEvaluator:
        return PIIEvaluator.from_config(config, detect)

    return factory

