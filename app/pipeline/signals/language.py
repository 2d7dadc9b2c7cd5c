"""Language signals: `routing.signals.language[]` (`{name: ISO 639-1 code, threshold}`).

The last user text's language is identified once per request (app/models/language.py); a
rule matches when that language is the rule's and its probability reaches the threshold.
The detected language and probability are reported on every rule, matched or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.config.models import RouterConfig
from app.config.semantic_signals import LanguageSignal
from app.models.language import LanguageDetector
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, error_matches

FAMILY = "language"
INLINE_CHARS = 600  # shorter texts are identified on the event loop (well under a millisecond)


class LanguageEvaluator:
    family = FAMILY

    def __init__(self, rules: list[LanguageSignal]) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._detector: LanguageDetector | None = None

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> LanguageEvaluator:
        return cls(config.routing.signals.language)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        if self._rules and self._detector is None:
            rules = list(self._rules)
            self._detector = await asyncio.to_thread(LanguageDetector, rules)

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(FAMILY, names - known, "no language rule with that name")
        if not known:
            return out
        try:
            await self.warm_up()
            assert self._detector is not None
            if len(ctx.text) <= INLINE_CHARS:
                language, probability = self._detector.detect(ctx.text)
            else:
                language, probability = await asyncio.to_thread(self._detector.detect, ctx.text)
        except Exception as exc:  # a broken detector is a signal error, never a failed request
            return out + error_matches(FAMILY, known, f"language identification failed: {exc}")
        detail = {"detected": language, "probability": round(probability, 4)}
        for name in sorted(known):
            rule = self._rules[name]
            matched = language == rule.name and probability >= rule.threshold
            confidence = probability if language == rule.name else 0.0
            out.append(
                SignalMatch(type=FAMILY, name=name, matched=matched, confidence=confidence, detail=detail)
            )
        return out
